"""Caps and renders as plain-text cells, one home for what the command line, docs/zoo.md and the zoo site show: the
caps matrix (one row per template, the same in `chatcaps zoo`, docs/zoo.md and `chatcaps zoo --html`), the Caps
fields grouped as `chatcaps detect` prints them, the reasoning controls, and the render report."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from itertools import groupby
from typing import Any

import orjson

from chatcaps.caps import Caps
from chatcaps.render import RenderResult


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


def call_format_line(caps: Caps) -> str:
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
                call_format_line(caps),
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


def json_text(value: Any) -> str:
    """A value as one line of JSON: strings quoted so that whitespace and newlines show."""
    return orjson.dumps(value).decode()


def caps_rows(caps: Caps) -> list[tuple[str, str]]:
    """Every Caps field but the controls and probe errors (tables of their own) as (dotted name, JSON value); the
    tool-call format one row per part."""
    rows: list[tuple[str, str]] = []
    for key, value in asdict(caps).items():
        if key == "probe_errors":
            continue
        if isinstance(value, dict):
            for sub, item in value.items():
                if sub == "call_format" and isinstance(item, dict):
                    rows += [(f"{key}.{sub}.{part}", json_text(held)) for part, held in item.items()]
                elif sub != "controls":
                    rows.append((f"{key}.{sub}", json_text(item)))
        else:
            rows.append((key, json_text(value)))
    return rows


def caps_groups(caps: Caps) -> list[tuple[str, list[tuple[str, str]]]]:
    """`caps_rows` in the sections `chatcaps detect` draws: a run of fields of one Caps part (reasoning, tools, ...)
    is one group named after it; a run of top-level fields is one group named ""."""
    return [
        (group, list(rows))
        for group, rows in groupby(caps_rows(caps), key=lambda row: row[0].partition(".")[0] if "." in row[0] else "")
    ]


CONTROL_COLUMNS = ("name", "kind", "role", "values", "default", "effect")
"""The reasoning controls' table, in `chatcaps detect` and on the zoo site."""


def control_rows(caps: Caps) -> list[tuple[str, ...]]:
    """One `CONTROL_COLUMNS` row per reasoning control: what it takes and what each value does."""
    return [
        (
            control.name,
            control.kind,
            control.role,
            ", ".join(json_text(value) for value in control.values),
            json_text(control.default),
            "; ".join(
                f"{value}: {effect.state}, history {effect.history}"
                + (f", reads {effect.format}" if effect.format else "")
                for value, effect in control.effect.items()
            ),
        )
        for control in caps.reasoning.controls
    ]


def report_lines(result: RenderResult) -> list[str]:
    """The render report, one field a line (values as JSON), in `RenderResult.to_dict()`'s terms."""
    record = result.reasoning.to_dict()
    lines = ["applied:" + ("" if result.applied else " []")]
    lines += [f"  - {applied.polyfill}: {applied.detail}" for applied in result.applied]
    lines.append("reasoning:")
    lines += [f"  {key}: {json_text(value)}" for key, value in record.items()]
    lines += [
        f"unused_template_args: {json_text(list(result.unused_template_args))}",
        f"generation_prompt: {json_text(result.generation_prompt)}",
        f"starts_in_reasoning: {json_text(result.starts_in_reasoning)}",
        f"reasoning_markers: {json_text(dict(result.reasoning_markers))}",
        "warnings:" + ("" if result.warnings else " []"),
    ]
    lines += [f"  - {warning}" for warning in result.warnings]
    return lines
