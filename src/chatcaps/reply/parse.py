"""Read a model's reply with transformers' `ResponseParser` on the template's `response_template`: in one go
(`parse_reply`) or as it streams (`ReplyStream`: the events of `chatcaps.events`, or OpenAI `chat.completion.chunk`
deltas made of them).

Both are one parser run: `parse_reply` feeds the whole text to a `ReplyStream`. The message's fields are the parser's
final values; the deltas are its `region_chunk` events with the `text` parser's strip applied as they arrive (leading
whitespace dropped, trailing whitespace held until more text comes or the region closes), so merged deltas equal the
final values for any chunking, and marker text, which the parser consumes, never reaches a delta. `ReplyStream`
routes regions and audits the end; what a tool-call region holds is read by a `CallStream` (`call_stream.py`), which
sends `tool_calls` deltas: the name once, then the arguments, in pieces where the format allows it
(`streamed_head`), else whole when the call's region closes.

Bad output is normal and never raises: each case has a defined result and a warning (docs/reply.md has the table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

from chatcaps.caps import Caps
from chatcaps.events import Call, Event, Reasoning, Text
from chatcaps.reply.call_stream import CallStream
from chatcaps.reply.calls import CALL_SEPARATOR, TOOL_CALLS, closing_text
from chatcaps.reply.grammar import (
    AFTER_END,
    CONTENT,
    ENDED,
    HEADER,
    REASONING,
    calls_only,
    channel_of,
    loaded,
    turn_end,
)
from chatcaps.reply.layout import Layout
from chatcaps.reply.stages import HeldCalls, RepeatedTag, repeated_tag
from chatcaps.wire import openai
from chatcaps.wire.openai import assistant_message

ReplyEnd = Literal["complete", "in_reasoning"]
"""Where a reply's text ended (`Reply.finish`): whole, or inside the reasoning block (no end marker)."""
_LAST = 256
CallsInReasoning = Literal["call", "keep", "recover"]
"""What a tool call written inside the reasoning block is: "call" (default), reasoning text where the model closes the
block later, else (the text ends inside the block) its opening ends the reasoning and it is a call; "keep", reasoning
text, warned; "recover", reasoning text and a call too."""


@dataclass(frozen=True)
class Reply:
    """A model's reply read with the template's grammar."""

    content: str
    reasoning_content: str | None = None
    """None where the reply has no reasoning text (an empty block, or the prompt's own closed block, included)."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """OpenAI-shaped calls: `{"id", "type": "function", "function": {"name", "arguments"}}`, arguments a JSON
    object as text; an id the reply does not write is `call_<index>`."""
    finish: ReplyEnd = "complete"
    """"in_reasoning": the text ended inside the reasoning block (no end marker): the model was cut off, or stopped,
    while reasoning. A server that stopped at its token limit reports "length" either way."""
    warnings: tuple[str, ...] = ()
    """What was odd about the text; text left out of every field is quoted at the end of its warning."""
    calls: tuple[Call, ...] = field(default=(), compare=False, repr=False)
    """The calls as read, in no API's shape: the id None where the reply writes none (`tool_calls` says
    `call_<index>` there)."""

    def to_message(self) -> dict[str, Any]:
        """The reply as OpenAI's assistant message, also canonical input: `content` None where the model only called
        tools."""
        return assistant_message(self.content, self.reasoning_content, self.tool_calls)


def parse_reply(
    text: str,
    caps: Caps,
    *,
    prefix: str = "",
    tools: Sequence[Mapping[str, Any]] | None = None,
    end_of_turn: str | None = None,
    calls_in_reasoning: CallsInReasoning = "call",
    raw: bool = False,
) -> Reply:
    """Read `text`, what the model generated after `prefix`.

    `prefix` is the prompt (or its generation prompt with any prefill): what it wrote of the assistant message, an
    opened reasoning block say, is part of the reply; "" means `text` is the whole message. `end_of_turn` is the text
    the template ends an assistant message with: None takes `caps.end_of_turn`, "" means none (then cut the
    end-of-sequence token off first). `tools` types tool-call arguments from their schemas, and a call to a name
    not among them gets a warning. A tool call inside the reasoning block is reasoning text where the end marker
    follows it; where none follows, its opening ends the reasoning there and it is read as a call, with a warning
    (`calls_in_reasoning="call"`: a model that starts calling without closing its thinking loses no call, one that
    thinks about a call's syntax keeps its thinking whole); with `"keep"` the call stays reasoning text,
    with a warning, and `"recover"` also reads it as a call (its text stays in the reasoning, so that a stream,
    which sent it as reasoning already, gives the same message). `raw=True` keeps the reasoning
    in `content` as the model wrote it, markers included (llama.cpp's `--reasoning-format none`): `text` is read on
    its own, as if the template had no reasoning markers; tool calls are still read, and answer headers are still
    grammar (`Caps.reasoning.content_headers`).
    """
    stream = ReplyStream(
        caps,
        prefix=prefix,
        tools=tools,
        end_of_turn=end_of_turn,
        calls_in_reasoning=calls_in_reasoning,
        raw=raw,
    )
    stream.feed(text)
    stream.close()
    return stream.reply


class ReplyStream:
    """Events for a streamed reply: `feed_events` each piece of generated text, then `close_events`; `reply` is then
    the `Reply` that `parse_reply` gives for the whole text (with the same `raw`). `initial_events` holds the events
    of what `prefix` already wrote. `feed`, `close` and `initial` give the same as OpenAI's deltas
    (`chatcaps.wire.openai.deltas`).

    The text passes through its stages first (`reply/stages.py`: the generation prompt's last tag dropped where the
    model writes it again). It routes the parser's regions into reasoning and content (each stripped as it arrives,
    `Layout`), hands the tool-call regions to a `CallStream`, and audits the end: a reply cut off inside reasoning or
    a call, marker text kept in a field, text after the end of turn, calls written inside the reasoning.

    With `calls_in_reasoning="call"`, where a call's opening closes the reasoning region, what follows is held (no
    events) until it is decided (`stages.HeldCalls`): the end marker in the text after it means the model closed its
    reasoning, and the message is read again with the grammar where only the end marker closes it; the text ending
    first means a call, and the held events are routed as they came."""

    def __init__(
        self,
        caps: Caps,
        *,
        prefix: str = "",
        tools: Sequence[Mapping[str, Any]] | None = None,
        end_of_turn: str | None = None,
        calls_in_reasoning: CallsInReasoning = "call",
        raw: bool = False,
    ) -> None:
        from transformers.utils.chat_parsing import ResponseParser

        channel = channel_of(caps)
        repeated = repeated_tag(caps, prefix)
        if raw:  # the generated text alone, read by the grammar of a template without reasoning markers
            unmarked = replace(caps.reasoning, start_marker=None, end_marker=None, channel_style=False)
            caps, prefix = replace(caps, reasoning=unmarked), ""

        self._caps = caps
        self._tools = [dict(tool) for tool in tools or ()]
        self._calls_in_reasoning = calls_in_reasoning
        call_format = caps.tools.call_format
        ends = calls_in_reasoning == "call" and call_format is not None and caps.reasoning.end_marker is not None
        self._spec = loaded(caps, end_of_turn, channel, calls_end_reasoning=ends)
        others = call_format.alternative_turn_ends if call_format else ()
        self._markers = tuple(marker for marker in (*_markers(caps), turn_end(caps, end_of_turn), *others) if marker)
        self._last = ""
        """The text's last `_LAST` characters: a call's closing text held until the text ended is found there."""
        self._layout: dict[str, Layout] = {}
        self._pieces: dict[str, list[str]] = {REASONING: [], CONTENT: []}
        """Each region's value per field, where the field is written in pieces joined by a separator."""
        self._finishing = False
        self._finish: ReplyEnd = "complete"
        self._warnings: list[str] = []
        self._repeat = RepeatedTag(repeated, self._warnings) if repeated else None
        """The generation prompt's last tag dropped where the text writes it again first, until that is decided."""
        self._calls = CallStream(call_format, self._tools, self._warnings, channel) if call_format else None
        """What the tool-call regions hold, read apart from the routing."""
        self._reply: Reply | None = None
        if prefix and self._spec.start_anchor_re.search(prefix) is None:
            self._warnings.append("the prefix holds no start anchor: all of it was read as part of the message")
        self._head: str | None = self._spec.truncate_past_last_anchor(prefix)
        """The message's text until its first region opens: the reasoning opener is matched on it."""

        def parser_for(spec: Any) -> ResponseParser:
            return ResponseParser(spec, prefix=prefix, tools=list(self._tools))

        end = caps.reasoning.end_marker
        self._held_calls: HeldCalls | None = None
        """While a call's opening may still close the reasoning region (it is open, or may open): the stage that
        holds what follows such an opening until it is decided. None once that cannot happen."""
        if ends and end is not None:
            later = partial(loaded, caps, end_of_turn, channel)
            self._held_calls = HeldCalls(self._spec, parser_for, later, end)
            self._parser = self._held_calls.parser
            initial = self._held_calls.initial()
        else:
            self._parser = parser_for(self._spec)
            initial = self._parser.initial_events
        self.initial_events: list[Event] = self._routed(initial)
        self._settle()

    @property
    def initial(self) -> list[dict[str, Any]]:
        return openai.deltas(self.initial_events)

    def feed(self, text: str) -> list[dict[str, Any]]:
        """`feed_events` as OpenAI's deltas."""
        return openai.deltas(self.feed_events(text))

    def close(self) -> list[dict[str, Any]]:
        """`close_events` as OpenAI's deltas."""
        return openai.deltas(self.close_events())

    def feed_events(self, text: str) -> list[Event]:
        """The events `text` completes; marker text, and anything that may still turn out to be a marker, held."""
        if self._repeat is not None:
            text = self._repeat.feed(text)
            if self._repeat.done:
                self._repeat = None
            if not text:
                return []
        self._last = (self._last + text)[-_LAST:]
        if self._head is not None:
            self._head += text
        if self._held_calls is None:
            return self._routed(self._parser.feed(text))
        now, reread = self._held_calls.feed(text)
        deltas = self._routed(now) if now else []
        if self._held_calls.decided:
            self._settle()
        return deltas + self._routed(reread) if reread else deltas

    def close_events(self) -> list[Event]:
        """The last events, once the text has ended; sets `reply`."""
        if self._repeat is not None:  # the text ended while it could still be the tag: it was text
            written = self._repeat.flush()
            self._repeat = None
            if written:
                return self.feed_events(written) + self.close_events()
        # The text ended with no end marker after a call's opening in the reasoning: a call, routed as it came.
        held = self._held_calls.close() if self._held_calls is not None else []
        self._settle()
        deltas = self._routed(held)
        self._finishing = True
        message, events = self._parser.finalize()
        deltas += self._routed(events)
        reasoning, content, after = message.get(REASONING), message.get(CONTENT, ""), message.get(AFTER_END)
        if isinstance(reasoning, dict):  # where calls end the reasoning: its text and what closed it
            reasoning = reasoning["text"] or None
        # A field written in pieces with a separator: its non-empty pieces joined, as the deltas sent them.
        if REASONING in self._spec.fields and (join := self._spec.fields[REASONING].join):
            reasoning = join.join(self._pieces[REASONING]) or None
        if (join := self._spec.fields[CONTENT].join) is not None:  # "" too: content after a header
            content = join.join(self._pieces[CONTENT])
        if self._finish == "in_reasoning":
            end = self._caps.reasoning.end_marker
            self._warnings.append(f"the reply ended inside the reasoning block: no end marker {end!r}")
        for name, value in ((REASONING, reasoning), (CONTENT, content)):
            self._warnings += [
                f"the {name} holds the marker {marker!r}, kept as text"
                for marker in self._markers
                if value and marker in value
            ]
        if after:
            self._warnings.append(f"text after the end of turn, not part of the message: {after!r}")
        if reasoning and self._calls is not None:
            deltas += self._reasoning_calls(reasoning)
        calls = tuple(self._calls.calls) if self._calls is not None else ()
        warnings = tuple(self._warnings)
        self._reply = Reply(content, reasoning, openai.calls(calls), self._finish, warnings, calls)
        return deltas

    @property
    def reply(self) -> Reply:
        if self._reply is None:
            raise RuntimeError("the reply is known once the stream is closed")
        return self._reply

    def _routed(self, events: list[dict[str, Any]]) -> list[Event]:
        deltas: list[Event] = []
        for event in events:
            field = CONTENT if event["field"] == HEADER else event["field"]  # content after a header (`loaded`)
            if field == TOOL_CALLS:
                # A piece of a call goes straight to the CallStream: this runs for each piece of a long call.
                if event["type"] == "region_chunk" and self._calls is not None:
                    deltas += self._calls.feed(event["text"])
                else:
                    deltas += self._call_event(event)
                continue
            if field == CALL_SEPARATOR:  # a further call where the template writes one per turn
                if event["type"] == "region_close":
                    self._warnings.append(
                        "a further call after punctuation, read as a call (the template writes one call per turn):"
                        f" {event['value']!r}"
                    )
                continue
            if event["type"] == "region_open":
                join = self._spec.fields[field].join or ""
                self._layout[field] = Layout(join if self._pieces.get(field) else "")
                if field == REASONING:
                    self._opened_reasoning()
                self._head = None
            elif event["type"] == "region_close" and field in self._pieces:
                if event["value"] and self._spec.fields[field].join is not None:
                    self._pieces[field].append(event["value"])
                if field == REASONING:
                    self._reasoning_closed(event["value"])
            elif event["type"] == "region_chunk" and (kind := _EVENTS.get(field)) is not None:
                text = self._layout[field].push(event["text"])
                if text and deltas and type(last := deltas[-1]) is kind:  # one event for a region's text in a feed
                    deltas[-1] = kind(last.text + text)
                elif text:
                    deltas.append(kind(text))
        return deltas

    def _call_event(self, event: dict[str, Any], last: str | None = None) -> list[Event]:
        """A tool-call region's event, read by the `CallStream`; where the text ended inside the call, a warning.
        `last` is the end of the text the region is in (the reply's, unless said)."""
        assert self._calls is not None  # the field exists only with a call format
        if event["type"] == "region_chunk":
            return self._calls.feed(event["text"])
        if event["type"] != "region_close":
            return []
        ended_open = self._finishing and not self._ends_closed(self._last if last is None else last)
        if ended_open and (closing := closing_text(self._calls.call_format)):
            self._warnings.append(f"the reply ended inside a tool call: no {closing!r}")
        self._head = None
        deltas = self._calls.close(event["value"], closed=not ended_open)
        if last is None and self._calls.kept:  # no call, or text after one: content where it stood
            deltas += self._content_piece(self._calls.kept)
        return deltas

    def _content_piece(self, text: str) -> list[Event]:
        """`text` as a piece of the content of its own, stripped and joined as the content's regions are."""
        text = text.strip()
        if not text:
            return []
        join = self._spec.fields[CONTENT].join or ""
        separator = join if self._pieces[CONTENT] else ""
        self._pieces[CONTENT].append(text)
        return [Text(separator + text)]

    def _ends_closed(self, last: str) -> bool:
        """`last` ends with the call's closing text: the parser held it (a pattern at the end of what it has read
        could still grow) and closed the region only when the text ended."""
        close = self._spec.fields[TOOL_CALLS].close_re
        end = len(last.rstrip())
        return close is not None and any(match.end() >= end for match in close.finditer(last))

    def _reasoning_calls(self, reasoning: str) -> list[Event]:
        """Tool calls written inside the reasoning block, read with the calls' grammar alone: a warning, and with
        "recover" a delta per call."""
        from transformers.utils.chat_parsing import ResponseParser

        parser = ResponseParser(calls_only(self._caps), prefix="", tools=list(self._tools))
        events = parser.feed(reasoning) + parser.finalize()[1]
        if not any(event["field"] == TOOL_CALLS for event in events):
            return []
        if self._calls_in_reasoning != "recover":
            self._warnings.append("the reasoning holds a tool call, kept as reasoning text")
            return []
        self._warnings.append("the reasoning holds a tool call, read as a call too (its text stays in the reasoning)")
        last = reasoning[-_LAST:]
        return [delta for event in events if event["field"] == TOOL_CALLS for delta in self._call_event(event, last)]

    def _settle(self) -> None:
        """Drop the held-calls stage once it is decided: its parser (the second grammar's, after a read again) reads
        on alone."""
        if self._held_calls is not None and self._held_calls.decided:
            self._parser, self._spec = self._held_calls.parser, self._held_calls.spec
            self._held_calls = None

    def _reasoning_closed(self, value: Any) -> None:
        """The reasoning region closed: at the end of the text without its end marker (cut off inside it), or, where
        calls end it (a `{"text", ENDED}` value), at a call's opening (warned)."""
        ended = value[ENDED] if isinstance(value, dict) else not self._finishing
        if self._finishing and not ended:
            self._finish = "in_reasoning"
        elif not ended:
            end = self._caps.reasoning.end_marker
            self._warnings.append(f"the reasoning block ended at a tool call, without its end marker {end!r}")

    def _opened_reasoning(self) -> None:
        """Warn where the opener held the start marker more than once (the model repeated what the prompt opened)."""
        start = self._caps.reasoning.start_marker
        opener = self._spec.fields[REASONING].open_re.match(self._head or "")
        if start and opener is not None and opener.group().count(start) > 1:
            repeated = opener.group()[opener.group().index(start) + len(start) :]
            self._warnings.append(f"the start marker {start!r} repeated; not reasoning text: {repeated.strip()!r}")


_EVENTS: dict[str, type[Text | Reasoning]] = {REASONING: Reasoning, CONTENT: Text}
"""The event each text field's pieces are."""


def _markers(caps: Caps) -> tuple[str | None, str | None]:
    """The reasoning markers the grammar uses: none without an end marker."""
    end = caps.reasoning.end_marker
    return (caps.reasoning.start_marker, end) if end else (None, None)
