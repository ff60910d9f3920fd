"""A template's reply grammar as transformers' declarative `response_template`, derived from Caps alone.

transformers (`transformers.utils.chat_parsing`) runs such a template with one streaming parser: it cuts the prompt
past the last `start_anchor`, feeds what remains followed by the model's text, and routes the text between each
field's `open` and `close` into that field of the message; text outside every explicit field goes to the one field
without an `open` (the implicit region). The mapping from Caps (docs/reply.md has the table and the limits):

- `start_anchor`: the generation prompt up to its reasoning part. What the prompt wrote after it (an opened block, an
  empty closed one, a prefill) is fed to the parser as the start of the message, so a forced-open prompt leaves the
  parser inside `reasoning_content` and a closed one behind it. A template whose generation prompt is empty before
  its reasoning part gets a pattern instead: the end of the prompt, less a reasoning part the prompt ends with.
- `reasoning_content`: opens with the start marker at the very start of the message (`\\A`: a marker later in the
  reply is content the model chose to write, as `chatcaps.output.parse_output` reads it), repeats of the marker
  included (a model repeating what the prompt opened writes no reasoning text with it); a lone end marker there is
  an empty block. It closes with the end marker, a literal, so the parser commits it the moment it is complete;
  where the template has content headers, also on one right where the block opens (the model skipped its thinking:
  an empty block), a pattern then. Without a start marker the message starts inside the block (the generation
  prompt opened it).
- `content`: the implicit region, everything else; with tool calls, its pieces around the calls are joined.
- `after_end_of_turn` (only with an end of turn): opened by the text the template writes after an assistant message
  (`Caps.end_of_turn`), by one it writes instead after a call's variant (`CallFormat.alternative_turn_ends`), or by
  the rest of it where a tool-call turn's calls took its head (`_call_turn_ends`), so a reply that still carries its
  end of turn parses cleanly and text the model wrote past it stays apart.
- `tool_calls` (only with `Caps.tools.call_format`, see `chatcaps.reply.calls`): one region per call, or one for a
  list written as a single JSON or Python list.

- `content_header` (only with `Caps.reasoning.content_headers`): an answer's header or wrapper tag the template writes
  before the answer (`<|START_TEXT|>` after the end marker, `<|START_RESPONSE|>` after the turn's opening), with or
  without reasoning markers: a field that opens on the header and closes at once, holding nothing, so it never
  reaches content. Its closing tag (`<|END_RESPONSE|>`) starts the end of turn. A header that starts with a word
  (functionary's `all\n`) is no special token: it opens the field only at the message's start.
- Channel-style templates (`Caps.reasoning.channel_style`, each channel a message of its own: Harmony): reasoning
  closes at its end marker or where the next message's opening begins, and opens again as a message of its own;
  `content_header` takes each message header without a call's recipient (never the reasoning's), holding nothing,
  raw or not; a call written as a message of its own, on any channel, reads its header loosely
  (`chatcaps.reply.calls.message_head`); reasoning and content written in several messages are joined with
  `SEPARATOR`. docs/reply.md, "Channel-style templates".

Whitespace around reasoning and before content is layout: the `text` content parser strips each field's value
(`strip` defaults to true), and the start marker's pattern takes the whitespace around it. Nothing else is dropped.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import orjson

from chatcaps.caps import CallFormat, Caps
from chatcaps.defaults import GRAMMARS
from chatcaps.reply.calls import TOOL_CALLS, Channel, attributes, tool_calls_fields
from chatcaps.vocab import REASONING_CONTENT, common_prefix_length

if TYPE_CHECKING:
    from transformers.utils.chat_parsing.response_templates import ResponseTemplate

REASONING, CONTENT, AFTER_END, HEADER = REASONING_CONTENT, "content", "after_end_of_turn", "content_header"
ENDED = "ended"
"""Where a call's opening ends the reasoning (`loaded(..., calls_end_reasoning=True)`): the reasoning's value is
`{"text": ..., ENDED: ...}`, ENDED the end marker that closed it, "" where something else did."""
SEPARATOR = "\n\n"
"""Between the pieces of one field written as several messages (channel-style templates: two analysis messages, a
commentary preamble and the final answer)."""


def response_template(caps: Caps, *, end_of_turn: str | None = None) -> dict[str, Any]:
    """The template's reply grammar as a transformers `response_template` (set it as `tokenizer.response_template`).

    `end_of_turn` is what the template writes after an assistant message; None takes `caps.end_of_turn`, "" means
    none. Tool calls come out as transformers' messages hold them: `{"type": "function", "function": {"name",
    "arguments"}}`, arguments a dict (typed from the tools' schemas by `parse_response(..., tools=...)`).
    """
    return _template(*_inputs(caps, end_of_turn), strict=True)


def turn_end(caps: Caps, end_of_turn: str | None) -> str | None:
    """The end of turn in effect: the argument, else Caps'; "" for none."""
    return (caps.end_of_turn if end_of_turn is None else end_of_turn) or None


_Inputs = tuple[
    str, str | None, str | None, str | None, CallFormat | None, tuple[str, ...], Channel | None, Channel | None
]


def _inputs(caps: Caps, end_of_turn: str | None, calls_channel: Channel | None = None) -> _Inputs:
    reasoning = caps.reasoning
    channel = channel_of(caps)
    return (
        caps.generation_prompt,
        reasoning.start_marker,
        reasoning.end_marker,
        turn_end(caps, end_of_turn),
        (caps.tools.call_format),
        reasoning.content_headers,
        channel,
        calls_channel or channel,
    )


def channel_of(caps: Caps) -> Channel | None:
    """A channel-style template's (`Caps.reasoning.channel_style`) reasoning end marker, the text opening its next
    message (the generation prompt) and its content headers; None for other templates, and for Caps whose markers
    were taken out (`parse_reply(..., raw=True)` reads the text as if the template had none)."""
    reasoning = caps.reasoning
    if not (reasoning.channel_style and reasoning.end_marker and reasoning.content_headers):
        return None
    return reasoning.end_marker, caps.generation_prompt.strip(), reasoning.content_headers, reasoning.start_marker or ""


def end_of_turn_in(turn: str, content: str) -> str | None:
    """The end of turn in `turn`, a render whose last message is an assistant message with `content`: what follows
    that content, less layout whitespace; None where the template writes nothing after it."""
    return turn[turn.rindex(content) + len(content) :].strip() or None


def loaded(
    caps: Caps,
    end_of_turn: str | None = None,
    calls_channel: Channel | None = None,
    *,
    calls_end_reasoning: bool = False,
) -> ResponseTemplate:
    """The grammar chatcaps itself parses with, validated and compiled by transformers, once per grammar: the same
    regions as `response_template`, with tool calls left in a form that bad output cannot make raise (see
    `chatcaps.reply.calls`). `calls_channel` reads calls and answer headers as a channel-style template writes them
    where `caps` no longer say so (`parse_reply(..., raw=True)` reads the text as if the template had no reasoning
    markers).
    `calls_end_reasoning`: a tool call's opening ends the reasoning block as its end marker does (a lookahead: the
    call is then read as a call, `calls_in_reasoning="call"`)."""
    key = (*_inputs(caps, end_of_turn, calls_channel), calls_end_reasoning)
    return _loaded(orjson.dumps(key, default=asdict))


def calls_only(caps: Caps) -> ResponseTemplate:
    """`loaded` for a text that is all message: the tool calls and the content around them, no reasoning, no end of
    turn (to find calls written inside a reasoning block)."""
    return _loaded(orjson.dumps(("", None, None, None, caps.tools.call_format, (), None, None, False), default=asdict))


@lru_cache(maxsize=GRAMMARS)
def _loaded(key: bytes) -> ResponseTemplate:
    from transformers.utils.chat_parsing.response_templates import load_response_template

    prompt, start, end, eot, call_format, headers, channel, calls_channel, calls_end = orjson.loads(key)
    calls = CallFormat.from_dict(call_format) if call_format else None
    fields = _template(
        prompt, start, end, eot, calls, tuple(headers), _as_channel(channel), _as_channel(calls_channel), strict=False
    )
    if calls_end and REASONING in fields["fields"] and TOOL_CALLS in fields["fields"] and channel is None:
        # Closed on the end marker or before a call's opening; the value says which (`ENDED`: the end marker, or
        # "" from the opening's empty group where the call's opening or the end of the text closed it).
        reasoning = fields["fields"][REASONING]
        opening = _any_opening({TOOL_CALLS: fields["fields"][TOOL_CALLS]})
        reasoning["open_pattern"] = rf"(?:{reasoning['open_pattern']})(?P<{ENDED}>)"
        closing = re.escape(reasoning.pop("close")) if "close" in reasoning else reasoning["close_pattern"]
        reasoning["close_pattern"] = rf"(?P<{ENDED}>{closing})|{opening}"
        reasoning["transform"] = {"text": "{content}", ENDED: f"{{{ENDED}}}"}
    return load_response_template(fields)


def _as_channel(raw: list[Any] | None) -> Channel | None:
    """A `Channel` back from its JSON list."""
    return (raw[0], raw[1], tuple(raw[2]), raw[3]) if raw else None


def _template(
    prompt: str,
    start: str | None,
    end: str | None,
    eot: str | None,
    calls: CallFormat | None,
    headers: tuple[str, ...],
    channel: Channel | None,
    calls_channel: Channel | None,
    *,
    strict: bool,
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if end:
        if channel is not None:  # the channel ends at its end marker, or where the next message's header begins
            fields[REASONING] = {
                "open_pattern": _channel_opening(start, end, channel),
                "close_pattern": _channel_close(channel[0], channel[1]),
                "content": "text",
                "repeats": True,
                "join": SEPARATOR,
            }
        else:  # closed by the end marker (less a header it ends with), or by a header where the block opens
            close = _less_header(end, headers)
            skipped = _skipped(start, headers)
            closing = {"close_pattern": rf"{re.escape(close)}|{skipped}"} if skipped else {"close": close}
            fields[REASONING] = {"open_pattern": _opening(start, end), **closing, "content": "text"}
        if start:
            fields[REASONING]["transform"] = "{content}"  # the value as parsed; it lets the pattern name a group
    fields[CONTENT] = {"content": "text"}
    if headers:  # grammar, never content: a field that opens on a header and closes at once, holding nothing
        header = _headers(headers, channel or calls_channel, calls, ended=channel is not None)
        fields[HEADER] = {"open_pattern": header, "close_pattern": r"(?=[\s\S])"}
    call_fields = tool_calls_fields(calls, eot, strict=strict, channel=calls_channel, prompt=prompt) if calls else {}
    if call_fields:
        fields |= call_fields
    if call_fields or headers:
        # The implicit region reopens after each call or header; joined, the text before them is not replaced by
        # the whitespace between them.
        fields[CONTENT] |= {"repeats": True, "join": SEPARATOR if channel is not None else ""}
    others = list(calls.alternative_turn_ends) if calls else []  # ends of turn a call's variant writes
    call_turn_ends = _call_turn_ends(eot, calls) if calls else []
    if eot:
        cut = _end_of_turn_opening(eot)
        alternatives = "".join(f"|{re.escape(other)}" for other in others)
        alternatives += "".join(f"|{_cut_short(end)}" for end in call_turn_ends)
        opening = [eot, *others] if others else eot
        if cut is None and not call_turn_ends:
            fields[AFTER_END] = {"open": opening}
        else:
            fields[AFTER_END] = {"open_pattern": (cut or re.escape(eot)) + alternatives}
        fields[AFTER_END]["content"] = "text"
    elif others:
        fields[AFTER_END] = {"open": others, "content": "text"}
    if headers and not strict:
        fields[HEADER] |= {"close_pattern": _any_opening(fields), "repeats": True, "join": fields[CONTENT]["join"]}
    return {"defaults": {"role": "assistant"}, **_anchor(prompt, start if end else None, end), "fields": fields}


def _any_opening(fields: dict[str, Any]) -> str:
    """A lookahead on any field's opening, named groups unnamed: the close of a content header's region in chatcaps'
    own grammar, which reads the content after a header in the header's region (`ReplyStream` takes its text as
    content). The region closes exactly where, in the implicit region, the first other field would open (the same
    match then opens it there), so the parse is the exported grammar's; but the parser watches one pattern while the
    content streams instead of every field's opening: transformers' partial-match search costs about a microsecond
    per watched pattern per piece."""
    openings = [field.get("open_pattern") or _literals(field.get("open", ())) for field in fields.values()]
    unnamed = (re.sub(r"\(\?P<\w+>", "(?:", opening) for opening in openings if opening)
    return "(?=" + "|".join(f"(?:{opening})" for opening in unnamed) + ")"


def _literals(opening: str | list[str] | tuple[()]) -> str:
    """A field's literal opening, one text or a list of them, as a pattern ("" for none)."""
    return "|".join(re.escape(text) for text in ([opening] if isinstance(opening, str) else opening))


def _call_turn_ends(eot: str | None, calls: CallFormat) -> list[str]:
    """How a tool-call turn ends where the call format's begin opens with the head of the end of turn: Kimi-K3 closes
    the answer's block (`<|close|>response<|sep|>` of `<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>`)
    before its calls, so the turn ends with the rest. The calls' text ends where the renders with and without them
    share their ending, so that rest may start at any tag of the head the begin took (the calls close their own block
    with `<|sep|>` too): each such end, longest first. None where the begin shares no whole tag with the end of turn,
    or all of it."""
    if not eot:
        return []
    begin = calls.begin.lstrip()
    shared = common_prefix_length(begin, eot)
    starts = [at for at, char in enumerate(eot) if char in "<[" and 0 < at <= shared]
    head = max((at for at in starts if eot[at - 1] in ">]"), default=0)
    return [eot[at:] for at in starts if at <= head]


def _cut_short(end: str) -> str:
    r"""A pattern for `end` anywhere, or at the very end of the text (`\Z`) without its last marker, the stop token a
    server strips. Only that cut: a shorter piece (a lone `<|sep|>`) would match at the end of a call's opening while
    the call is still coming, and a complete match there wins over the pending opening where openings are watched as
    one pattern (`_any_opening`)."""
    last = max(at for at, char in enumerate(end) if char in "<[")
    if not end[:last].strip():
        return re.escape(end)
    return rf"{re.escape(end)}|{re.escape(end[:last].rstrip())}\s*\Z"


def _end_of_turn_opening(eot: str) -> str | None:
    r"""A pattern for the end of turn anywhere, or, at the very end of the text, the end of turn cut before one of
    its later markers (a `<` or `[` after some text): a server strips the stop token a model ends with, so
    `<|END_RESPONSE|><|END_OF_TURN_TOKEN|>` reaches the parser as `<|END_RESPONSE|>`, and Kimi's
    `<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>` without its last marker; what is left is still the
    end of turn, not content. A cut piece matches only at the end (`\Z`): transformers holds a match that ends where
    the text read so far ends, and drops it as a delimiter once more text follows. None for an end of turn of one
    marker (`<|im_end|>`): the literal is opened on as it is.
    """
    cuts = sorted({at for at, char in enumerate(eot) if char in "<[" and eot[:at].strip()}, reverse=True)
    if not cuts:
        return None
    pieces = "|".join(re.escape(eot[:at].rstrip()) for at in cuts)
    return rf"{re.escape(eot)}|(?:{pieces})\s*\Z"


def _less_header(end: str, headers: tuple[str, ...]) -> str:
    """The end marker less a content header it ends with (Kimi-K3's `<|close|>think<|sep|><|open|>response<|sep|>`
    closes the think block and opens the response block): the header then opens its own field after the block, as
    where the model skips the block, and the content after it is read in the header's region (one pattern watched as
    it streams, `_any_opening`, instead of every field's opening)."""
    header = next((header for header in headers if end.endswith(header) and end[: -len(header)].strip()), "")
    return end[: len(end) - len(header)].rstrip()


def _skipped(start: str | None, headers: tuple[str, ...]) -> str | None:
    r"""A pattern for a content header right where the reasoning block opens (after the start markers, or at the
    message's start where the prompt opened the block): the model skipped its thinking and wrote the answer's header
    (Kimi-K3's `<|open|>response<|sep|>` after a prompt that opened `<|open|>think<|sep|>`), so the block closes
    there, empty, on the header as it would on its end marker. None without a header of tags. The lookahead comes
    first, so that the lookbehind runs only where a header follows (the pattern is searched as the reasoning
    streams)."""
    tags = "|".join(re.escape(header) for header in headers if header[:1] in "<[")
    if not tags:
        return None
    opened = rf"(?:{re.escape(start)}\s*)*" if start else ""
    return rf"(?=\s*(?:{tags}))(?<=\A\s*{opened})\s*(?:{tags})"


def _channel_opening(start: str | None, end: str, channel: Channel) -> str:
    """The reasoning channel opens at the message's start, or again as a message of its own later in the reply
    (`<|end|><|start|>assistant<|channel|>analysis<|message|>` after a commentary preamble): read as reasoning, its
    pieces joined, never as content."""
    if not start:
        return _opening(start, end)
    again = rf"(?:{re.escape(channel[0])}\s*)?{re.escape(channel[1])}\s*(?:{re.escape(start)}\s*)+"
    return rf"{_opening(start, end)}|{again}"


def _channel_close(end: str, opening: str) -> str:
    r"""The channel's end marker, or a lookahead on the next message's opening (the model wrote the next header
    without closing the channel: `...<|start|>assistant<|channel|>final<|message|>` or a call's header)."""
    return rf"{re.escape(end)}|(?=\s*{re.escape(opening)})"


def _headers(headers: tuple[str, ...], channel: Channel | None, calls: CallFormat | None, *, ended: bool) -> str:
    """Any of the content headers. In a channel-style template, any message header without a call's recipient: the
    end marker (where the reasoning's end is grammar: `ended`) and the generation prompt optional (the reasoning's
    close or the prompt wrote them), then the recipient the content headers write (muse-glimmer's `to=user`), then
    header tags with a word each, then the tag the content headers end with (`<|channel|>final<|message|>`, and a
    commentary preamble's `<|start|>assistant<|channel|>commentary<|message|>`); never the reasoning's own header, nor
    that header's last tag. The next message's opening alone is grammar as well where a tag follows it
    (`<|begin|>assistant` before Solar's `<|tool_calls|>`), not the reasoning's header (its own message) nor a call's
    recipient (muse-glimmer's `<|start|>assistant to=NAME`, the call's own opening); a call's header starting at the
    same place is longer and wins over it.

    Without `ended` (`parse_reply(..., raw=True)`: the reasoning kept as written, its end marker included) the end
    marker is never part of a header, and a header is one where a message starts: at the text's start or after the
    message's opening (the text is not cut into messages, so a header's tags elsewhere are text as written)."""
    if channel is None:  # a tag anywhere; a header of words only where the message starts (the model's first text)
        return "|".join(re.escape(header) if header[:1] in "<[" else rf"\A\s*{re.escape(header)}" for header in headers)
    end, opening, _, start = channel
    last = {tag for header in headers for tag in re.findall(r"<[^<>\s]+>\Z", header)}
    if len(last) != 1:
        return "|".join(re.escape(header) for header in headers)
    tag = last.pop()
    # The reasoning's header ends with the same tag (`<|channel|>analysis<|message|>`): its tag is not a header alone.
    reasoning = rf"(?<!{re.escape(start.removesuffix(tag))})" if start.endswith(tag) and start != tag else ""
    header = f"{_recipient(headers, opening)}{attributes(calls, headers, start, end)}{reasoning}{re.escape(tag)}"
    not_reasoning = rf"(?!{re.escape(start)})" if start else ""
    # Before a tag the template's headers write, or its calls' opening (Solar's `<|tool_calls|>`): text cut inside a
    # tag, or a tag the template never writes (`<|start|>assistant<|churn|>`), is text.
    ahead = "|".join(re.escape(tag) for tag in sorted(set(re.findall(r"<[^<>\s]+>", " ".join(headers))))) or "(?!)"
    ahead += rf"|{re.escape(calls.begin.strip())}" if calls and calls.begin.strip() else ""
    alone = rf"{re.escape(opening)}\s*{not_reasoning}(?={ahead})"
    if not ended:
        # The opening alone is no header after the end marker, which is text here: a call's header starts at the
        # end marker, and the lookahead that closes a header's region (`_any_opening`) would otherwise find the
        # opening complete before the call's header is.
        return rf"(?:\A\s*|{re.escape(opening)}\s*){header}|(?<!{re.escape(end)}){alone}"
    return rf"(?:{re.escape(end)}\s*)?(?:(?:{re.escape(opening)}\s*)?{header}|{alone})"


def _recipient(headers: tuple[str, ...], opening: str) -> str:
    """A pattern for the recipient the content headers write before their tags, after the message's opening
    (muse-glimmer's `<|start|>assistant to=user<|message|>`), with the whitespace after it; "" where they write
    none (gpt-oss' final channel has no recipient)."""
    written = {re.split(r"<[^<>\s]+>", header.removeprefix(opening), maxsplit=1)[0].strip() for header in headers}
    if written == {""}:
        return ""
    recipients = "|".join(re.escape(recipient) for recipient in sorted(written) if recipient)
    return rf"(?:{recipients})\s*" if "" not in written else rf"(?:(?:{recipients})\s*)?"


def _opening(start: str | None, end: str) -> str:
    r"""`\A`, then the start marker once or more with the whitespace after each, or an empty match before a lone end
    marker.

    transformers holds back a delimiter that more text could still change. A match that ends at the buffer's end is
    held; one that ends before it is held only if appending a character changes its span or its named groups. The
    whitespace is part of the match so that a buffer ending in it is held, and `more` is an empty group that takes
    part only where the buffer ends in a piece of the start marker (`<think><th`): without it the parser would commit
    `<think>` and stream the repeat that follows as reasoning text.
    """
    if not start:
        return r"\A"
    more = rf"(?P<more>(?={_piece_of(start)}\Z))?" if len(start) > 1 else ""
    return rf"\A\s*(?:(?:{re.escape(start)}\s*)+{more}|(?={re.escape(end)}))"


def _piece_of(marker: str) -> str:
    """A pattern for a proper, non-empty prefix of `marker`: `<(?:t(?:h(?:i(?:n(?:k)?)?)?)?)?` for `<think>`."""
    pattern = ""
    for char in reversed(marker[1:-1]):
        pattern = f"(?:{re.escape(char)}{pattern})?"
    return re.escape(marker[0]) + pattern


def _anchor(prompt: str, start: str | None, end: str | None) -> dict[str, str]:
    """The generation prompt before its reasoning part (the first marker in it), or, where that is empty, a pattern
    ending where the prompt's trailing reasoning part begins (the prompt's end when it has none)."""
    cut = min((at for at in (prompt.find(marker) for marker in (start, end) if marker) if at >= 0), default=len(prompt))
    if prompt[:cut]:
        return {"start_anchor": prompt[:cut]}
    parts = [rf"{re.escape(end)}\s*"] if end else []
    if start and end:
        parts.insert(0, rf"{re.escape(start)}\s*(?:{re.escape(end)}\s*)?")
    tail = "|".join(parts)
    # Greedy up to the first place where only the reasoning part is left: a lazy `.*?` would let transformers'
    # `finditer` find a second, longer match at the same place after an empty one, and cut past the reasoning part.
    return {"start_anchor_pattern": rf"\A(?:(?!(?:{tail})\Z).)*" if tail else r"\A.*"}
