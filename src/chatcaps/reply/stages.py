"""Stages a reply passes through around the parser before `ReplyStream` routes it, each a small object of its own
(as httpx chains its decoders): `feed` takes a piece and gives what goes on (holding what is not decided yet), and
what is held comes out once the text has ended.

`RepeatedTag`, before the parser: the tag the generation prompt ends with (Command R+'s `<|CHATBOT_TOKEN|>`, Phi-3's
`<|assistant|>`), which a model may write again as its first text: the turn's grammar, never its content, so it is
dropped (warned). `HeldCalls`, after it: where a call's opening closed the reasoning region, the events after it held
until the text says whether the model closed its reasoning later (then read again) or called (then let through).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chatcaps.caps import Caps
from chatcaps.reply.calls import CALL_SEPARATOR
from chatcaps.reply.grammar import ENDED, REASONING

if TYPE_CHECKING:
    from transformers.utils.chat_parsing.response_templates import ResponseTemplate as ResponseSpec

_LAST_TAG = re.compile(r"(<[^<>\s]+>)\s*\Z")


def repeated_tag(caps: Caps, prefix: str) -> str | None:
    """The tag the generation prompt ends with, which a model may write again as its first text. None where the
    prompt ends with no tag, with a reasoning marker (the grammar reads a repeated or lone marker itself), or where
    the `prefix` given is another prompt."""
    found = _LAST_TAG.search(caps.generation_prompt or "")
    if found is None or found[1] in (caps.reasoning.start_marker, caps.reasoning.end_marker):
        return None
    return found[1] if not prefix or prefix.rstrip().endswith(found[1]) else None


class RepeatedTag:
    """The text less `tag` where the message starts with it again (layout before it aside); `done` once that is
    decided, after which the stage passes nothing more through and is dropped."""

    def __init__(self, tag: str, warnings: list[str]) -> None:
        self.tag = tag
        self.done = False
        self._held = ""
        self._warnings = warnings

    def feed(self, text: str) -> str:
        """`text` as it goes on: "" while what the message has written may still be the tag (held)."""
        held = self._held + text
        written = held.lstrip()
        if self.tag.startswith(written):
            self._held = held
            return ""
        self.done = True
        if not written.startswith(self.tag):
            return held
        self._warnings.append(
            f"the reply starts with the generation prompt's last tag again, read as grammar: {self.tag!r}"
        )
        return written[len(self.tag) :]

    def flush(self) -> str:
        """What is held: the text ended while it could still be the tag, so it was text."""
        self.done = True
        held, self._held = self._held, ""
        return held


class HeldCalls:
    """Between the parser and the router, while a call's opening may still close the reasoning region (a grammar
    where calls end it, `calls_in_reasoning="call"`): the parser's events, held from where a call's opening closed
    the region until it is decided. The end marker in the text after it means the model closed its reasoning: the
    message is read again with the grammar where only the end marker closes it (`later`), from where the first read
    stopped; the text ending first means a call, and the held events go on as they came (`close`).

    `decided` once nothing can be read again (another region opened, the reasoning closed otherwise, a read again):
    the stage is then dropped and `parser` and `spec`, which may be the second grammar's, read on alone."""

    def __init__(
        self,
        spec: ResponseSpec,
        parser_for: Callable[[ResponseSpec], Any],
        later: Callable[[], ResponseSpec],
        end_marker: str,
    ) -> None:
        self.spec = spec
        self.parser = parser_for(spec)
        self.decided = False
        self._parser_for = parser_for
        self._later = later
        self._end = end_marker
        self._fed: list[str] = []
        """The text fed so far: read again where the model closes the reasoning after a call's opening."""
        self._held: list[dict[str, Any]] | None = None
        """The parser's events since a call's opening closed the reasoning region, held until it is decided."""
        self._window: str | None = None
        """While events are held: the text's end, too short to hold the end marker, searched with the next piece."""

    def initial(self) -> list[dict[str, Any]]:
        """The parser's events for what the prefix wrote."""
        return self._scanned(self.parser.initial_events)

    def feed(self, text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The parser's events `text` completes that go on now, and those of a read again it decided for (routed
        after the first, with the second grammar)."""
        self._fed.append(text)
        if self._held is not None:
            self._held += self.parser.feed(text)
            return [], self._closed_later(text)
        events = self.parser.feed(text)
        if not events or (len(events) == 1 and events[0]["type"] == "region_chunk"):  # most pieces of reasoning
            return events, []
        events = self._scanned(events)
        return events, self._closed_later(text) if self._held is not None else []

    def close(self) -> list[dict[str, Any]]:
        """The text ended with no end marker after a call's opening in the reasoning: a call, its events as they
        came."""
        self.decided = True
        held, self._held = self._held or [], None
        return held

    def _scanned(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`events` up to where a call's opening closed the reasoning region (the rest held); `decided` where a region
        other than the reasoning opened or the reasoning closed otherwise."""
        for at, event in enumerate(events):
            kind = event["type"]
            if kind == "region_chunk":  # most events: text of the region that is open
                continue
            if kind == "region_open" and event["field"] not in (REASONING, CALL_SEPARATOR):
                self.decided = True
                return events
            if kind == "region_close" and event["field"] == REASONING:
                value = event["value"]
                if isinstance(value, dict) and not value[ENDED]:
                    self._held = events[at:]
                    return events[:at]
                self.decided = True
                return events
        return events

    def _closed_later(self, text: str) -> list[dict[str, Any]]:
        """While events are held, `text` the newest piece: the end marker in the text so far (none came before the
        call's opening, which closed the region first) decides for reasoning text; until then nothing goes on."""
        seen = "".join(self._fed) if self._window is None else self._window + text
        if self._end in seen:
            return self._reread()
        self._window = seen[max(0, len(seen) - len(self._end) + 1) :]
        return []

    def _reread(self) -> list[dict[str, Any]]:
        """The model closed its reasoning after a call's opening: the call's text is reasoning text. The message so
        far is read again with the grammar where only the end marker closes the reasoning (a second parser, which
        then reads the rest), from where the first read stopped: the held events are dropped, and the reasoning text
        already sent, measured on a batch read with the first grammar (the parser's regions do not depend on the
        chunking), is skipped. Only this rare path pays for the two reads, not each piece."""
        text, self._held, self._window, self.decided = "".join(self._fed), None, None, True
        first = self._parser_for(self.spec)
        read = first.initial_events + first.feed(text)
        closed = next((at for at, event in enumerate(read) if _is(event, REASONING, "region_close")), len(read))
        skip = sum(len(event["text"]) for event in read[:closed] if _is(event, REASONING, "region_chunk"))
        self.spec = self._later()
        self.parser = self._parser_for(self.spec)
        events, opened = [], False
        for event in self.parser.initial_events + self.parser.feed(text):
            if not opened:  # up to the reasoning's opening: gone on already
                opened = _is(event, REASONING, "region_open")
            elif skip and _is(event, REASONING, "region_chunk"):
                piece = event["text"][skip:]
                skip -= len(event["text"]) - len(piece)
                if piece:
                    events.append({**event, "text": piece})
            else:
                events.append(event)
        return events


def _is(event: dict[str, Any], field: str, kind: str) -> bool:
    return bool(event["field"] == field and event["type"] == kind)
