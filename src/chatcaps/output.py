"""The output side: split what a model generated into reasoning and content, with the markers the probes found.

A render says where the model starts (`RenderResult.starts_in_reasoning`: the prompt left a reasoning block open) and
Caps say which markers delimit reasoning. `parse_output` applies both the way reasoning parsers in servers do
(llama.cpp's `--reasoning-format deepseek`, vLLM's reasoning parsers): the text between the markers is reasoning, the
rest is content; whitespace around reasoning and before content is layout, not text. The caller removes the
end-of-sequence token first (decode with it skipped, or cut it off).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chatcaps.caps import Caps


@dataclass(frozen=True)
class ParsedOutput:
    """A generated reply split in two; `reasoning_content` is None when the model wrote no reasoning block."""

    content: str
    reasoning_content: str | None = None
    reasoning_finished: bool = True
    """False when the text ended inside the reasoning block (the end marker never came)."""

    def to_message(self) -> dict[str, Any]:
        """The reply as a canonical assistant message."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        return message


def parse_output(
    text: str,
    markers: Caps | Mapping[str, str | None],
    starts_in_reasoning: bool = False,
    content_headers: Sequence[str] = (),
) -> ParsedOutput:
    """Split `text` at the reasoning markers (from Caps, or `RenderResult.reasoning_markers`).

    With `starts_in_reasoning` the text is reasoning up to the end marker. Otherwise a reasoning block counts only
    where the text opens with the start marker; a marker later in the reply is content the model chose to write.
    A content header right after the end marker (`Caps.reasoning.content_headers`, taken from Caps when given) is
    grammar, not content.
    """
    start, end = _markers(markers)
    if not end:
        return ParsedOutput(text)
    if not starts_in_reasoning:
        opening = text.lstrip()
        if not start or not opening.startswith(start):
            return ParsedOutput(text)
        text = opening[len(start) :]
    reasoning, found, content = text.partition(end)
    content = content.lstrip()
    headers = markers.reasoning.content_headers if isinstance(markers, Caps) else content_headers
    header = next((header for header in headers if content.startswith(header)), "")
    content = content[len(header) :].lstrip()
    return ParsedOutput(content if found else "", reasoning.strip(), reasoning_finished=bool(found))


def _markers(markers: Caps | Mapping[str, str | None]) -> tuple[str | None, str | None]:
    if isinstance(markers, Caps):
        return markers.reasoning.start_marker, markers.reasoning.end_marker
    return markers.get("start"), markers.get("end")
