"""The caps matrix: one row of single-line plain-text cells per template, the same in `chatcaps zoo` and docs/zoo.md
(which scripts/zoo_doc.py writes from these rows)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from chatcaps.caps import Caps


def cell(value: object) -> str:
    """One line of text: JSON for non-strings, newlines shown as \\n, "-" for nothing."""
    text = "" if value is None else json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text.replace("\n", "\\n") or "-"


def markdown_row(cells: Sequence[str]) -> str:
    """One Markdown table line; a `|` inside a cell is escaped."""
    return "| " + " | ".join(text.replace("|", "\\|") for text in cells) + " |"


def _controls(caps: Caps) -> str:
    return "; ".join(
        f"{control.name} ({control.role}{', stripped' if control.strips_flag else ''}"
        f"{', no system turn' if control.without_system else ''}, "
        f"default {json.dumps(control.default)}: {', '.join(json.dumps(value) for value in control.values)})"
        for control in caps.reasoning.controls
    )


def _roles(caps: Caps) -> str:
    flags = [("system", caps.roles.system), ("inline", caps.roles.system_inline), ("developer", caps.roles.developer)]
    text = ",".join(name for name, on in flags if on) or "user/assistant only"
    return text + (", alternation" if caps.roles.requires_alternation else "")


def _tools(caps: Caps) -> str:
    tools = caps.tools
    parts = [
        name for name in ("definitions", "calls", "parallel_calls", "responses", "call_id") if getattr(tools, name)
    ]
    return ",".join(parts) + (f" ({tools.arguments})" if tools.arguments else "") if parts else "-"


def _calls(caps: Caps) -> str:
    """The call format in one line: the shape a reply's calls are read in and the arguments' form, then the list's
    opening, one call and its closing, and the alternative openers and turn ends a variable turns on."""
    calls = caps.tools.call_format
    if calls is None:
        return "-"
    one = "one per turn" if calls.separator is None else f"sep {cell(calls.separator)}"
    also = [f"or {cell(opener)} before" for opener in calls.alternative_openers]
    also += [f"or ends {cell(end)}" for end in calls.alternative_turn_ends]
    notes = "; ".join([one, *also])
    shape = calls.shape or "no shape, not read"
    return f"{shape} / {calls.arguments}: {cell(calls.begin)} + {cell(calls.call)} + {cell(calls.end)} ({notes})"


def _content(caps: Caps) -> str:
    content = caps.content
    shapes = [name for name in ("string", "typed") if getattr(content, name)]
    return ",".join(shapes + list(content.block_types)) or "-"


MATRIX_COLUMNS = (
    "template",
    "reasoning",
    "markers",
    "history",
    "default state",
    "controls",
    "tools",
    "tool calls",
    "end of turn",
    "roles",
    "content",
)
"""The caps matrix's columns: docs/zoo.md and `chatcaps zoo` show the same cells."""


def matrix_rows(caps_by_file: Mapping[str, Caps]) -> list[tuple[str, ...]]:
    """One row of `MATRIX_COLUMNS` cells per template, sorted by name; cells are single-line plain text."""
    rows: list[tuple[str, ...]] = []
    for file, caps in sorted(caps_by_file.items()):
        reasoning = caps.reasoning
        end = f"{cell(reasoning.end_marker)}{' (inferred)' if reasoning.end_marker_inferred else ''}"
        markers = f"{cell(reasoning.start_marker)} … {end}"
        if reasoning.content_headers:  # the answer's channel header, after the end marker
            channels = "channels, " if reasoning.channel_style else ""
            markers += f" ({channels}then {' or '.join(cell(header) for header in reasoning.content_headers)})"
        if reasoning.start_marker is None and reasoning.end_marker is None:
            markers = "-"
        rows.append(
            (
                file,
                f"{reasoning.format}{' (tools only)' if reasoning.requires_tools else ''}",
                markers,
                reasoning.history,
                reasoning.default_state,
                cell(_controls(caps)),
                _tools(caps),
                _calls(caps),
                cell(caps.end_of_turn),
                _roles(caps),
                _content(caps),
            )
        )
    return rows


def matrix(caps_by_file: Mapping[str, Caps]) -> list[str]:
    """The caps matrix as Markdown table lines."""
    lines = [markdown_row(MATRIX_COLUMNS), "|" + "---|" * len(MATRIX_COLUMNS)]
    return lines + [markdown_row(row) for row in matrix_rows(caps_by_file)]
