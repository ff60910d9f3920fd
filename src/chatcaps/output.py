"""The earlier reply reader: `parse_output` splits what a model generated into reasoning and content, kept as a thin
alias of `chatcaps.reply.parse_reply` (one parser) for the callers that use it.

A render says where the model starts (`RenderResult.starts_in_reasoning`: the prompt left a reasoning block open) and
Caps say which markers delimit reasoning; `parse_output` reads the text with the grammar of those markers and content
headers alone (no tool calls, no end of turn: the caller removes the end-of-sequence token first, decoding with it
skipped or cutting it off). `parse_reply` reads more (tool calls, the end of turn, channels) and warns about odd text;
docs/reply.md, "parse_output", lists where this reading differs from the earlier splitter's. Like `parse_reply`, it
needs transformers (the `chatcaps[transformers]` extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chatcaps.caps import Caps, Reasoning
from chatcaps.reply import parse_reply
from chatcaps.wire.openai import assistant_message


@dataclass(frozen=True)
class ParsedOutput:
    """A generated reply split in two; `reasoning_content` is None when the model wrote no reasoning text."""

    content: str
    reasoning_content: str | None = None
    reasoning_finished: bool = True
    """False when the text ended inside the reasoning block (the end marker never came)."""

    def to_message(self) -> dict[str, Any]:
        """The reply as a canonical assistant message."""
        return assistant_message(self.content, self.reasoning_content)


def parse_output(
    text: str,
    markers: Caps | Mapping[str, str | None],
    starts_in_reasoning: bool = False,
    content_headers: Sequence[str] = (),
) -> ParsedOutput:
    """Split `text` at the reasoning markers (from Caps, or `RenderResult.reasoning_markers`) with `parse_reply`.

    With `starts_in_reasoning` the text is reasoning up to the end marker. Otherwise a reasoning block counts only
    where the text opens with the start marker; a marker later in the reply is content the model chose to write.
    A content header right after the end marker (`Caps.reasoning.content_headers`, taken from Caps when given) is
    grammar, not content. Whitespace around reasoning and content is layout; an empty block is no reasoning (None).
    """
    if isinstance(markers, Caps):
        start, end = markers.reasoning.start_marker, markers.reasoning.end_marker
        content_headers = markers.reasoning.content_headers
    else:
        start, end = markers.get("start"), markers.get("end")
    reasoning = Reasoning(start_marker=start, end_marker=end, content_headers=tuple(content_headers))
    caps = Caps("", "jinja2", reasoning=reasoning)
    reply = parse_reply(text, caps, prefix=_opened(start, end, starts_in_reasoning), end_of_turn="")
    return ParsedOutput(reply.content, reply.reasoning_content, reasoning_finished=reply.finish == "complete")


def _opened(start: str | None, end: str | None, starts_in_reasoning: bool) -> str:
    """What the prompt wrote of the message, as `parse_reply` takes it: the start marker where the text starts inside
    the block. Without a start marker the grammar opens the block at the message's start (the generation prompt
    opened it), so a text that does not start in it comes after the block's end."""
    if not end:
        return ""
    if starts_in_reasoning:
        return start or ""
    return "" if start else end
