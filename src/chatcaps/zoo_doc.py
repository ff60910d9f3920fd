"""docs/zoo.md: the caps matrix over the whole zoo, and where chatcaps disagrees with llama.cpp's labels.

`scripts/zoo_doc.py` writes it; a test regenerates it and fails when the committed file is stale. Reasons for
disagreements are reviewed by hand and kept in `docs/zoo_reviews.json` (file name -> reason).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from chatcaps.caps import Caps
from chatcaps.zoo import LABELS_FILE

_MARKERS = re.compile(r"^(\S.*?) -> (\S.*?)(?: \(| \||$)")


def _cell(value: object) -> str:
    """One line of text: JSON for non-strings, newlines shown as \\n, "-" for nothing."""
    text = "" if value is None else json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text.replace("\n", "\\n") or "-"


def _md(cell: str) -> str:
    return cell.replace("|", "\\|")


def _controls(caps: Caps) -> str:
    return "; ".join(
        f"{control.name} ({control.role}, default {json.dumps(control.default)}: "
        f"{', '.join(json.dumps(value) for value in control.values)})"
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
    "roles",
    "content",
)
"""The caps matrix's columns: docs/zoo.md and `chatcaps zoo` show the same cells."""


def matrix_rows(caps_by_file: Mapping[str, Caps]) -> list[tuple[str, ...]]:
    """One row of `MATRIX_COLUMNS` cells per template, sorted by name; cells are single-line plain text."""
    rows: list[tuple[str, ...]] = []
    for file, caps in sorted(caps_by_file.items()):
        reasoning = caps.reasoning
        markers = f"{_cell(reasoning.start_marker)} … {_cell(reasoning.end_marker)}"
        if reasoning.start_marker is None and reasoning.end_marker is None:
            markers = "-"
        rows.append(
            (
                file,
                f"{reasoning.format}{' (tools only)' if reasoning.requires_tools else ''}",
                markers,
                reasoning.history,
                reasoning.default_state,
                _cell(_controls(caps)),
                _tools(caps),
                _roles(caps),
                _content(caps),
            )
        )
    return rows


def matrix(caps_by_file: Mapping[str, Caps]) -> list[str]:
    """The caps matrix as Markdown table lines."""
    lines = ["| " + " | ".join(MATRIX_COLUMNS) + " |", "|" + "---|" * len(MATRIX_COLUMNS)]
    return lines + ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in matrix_rows(caps_by_file)]


def read_labels(zoo: Path) -> list[dict[str, str]]:
    path = zoo / LABELS_FILE
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def disagreements(
    caps_by_file: Mapping[str, Caps], labels: Sequence[Mapping[str, str]]
) -> list[tuple[str, str, str, str]]:
    """(file, what, llama.cpp says, chatcaps says) for thinking support, markers and forced-open generation prompts."""
    found = []
    for label in labels:
        caps = caps_by_file.get(label["file"])
        if caps is None:
            continue
        reasoning = caps.reasoning
        said = label["supports_thinking"].strip().lower().removeprefix("(p) ")
        ours = reasoning.default_state != "none"
        if said.startswith(("yes", "no")) and said.startswith("yes") != ours:
            found.append(
                (label["file"], "thinking", label["supports_thinking"], f"default_state {reasoning.default_state}")
            )
        match = _MARKERS.match(label["reasoning_markers"].strip())
        if match and (match.group(1).strip(), match.group(2).strip()) != (reasoning.start_marker, reasoning.end_marker):
            ours_markers = f"{reasoning.start_marker} -> {reasoning.end_marker}"
            found.append((label["file"], "markers", label["reasoning_markers"], ours_markers))
        forced = label["forced_open"].strip().lower().removeprefix("(p) ")
        if forced.startswith(("yes", "forced-open", "no")):
            said_forced = not forced.startswith("no")
            if said_forced != (reasoning.default_state == "forced_open"):
                found.append((label["file"], "forced_open", label["forced_open"], reasoning.default_state))
    return found


def render_doc(
    caps_by_file: Mapping[str, Caps], labels: Sequence[Mapping[str, str]], reviews: Mapping[str, str]
) -> str:
    lines = [
        "# The zoo, as chatcaps sees it",
        "",
        "Generated by `python scripts/zoo_doc.py` from `detect_caps` (jinja2 engine) over every zoo template; a test",
        "fails when this file is stale. Each cell is read from a render, never from the template's name.",
        "",
        f"## Caps matrix ({len(caps_by_file)} templates)",
        "",
        "Controls read `name (role, default D: values)`; markers `start … end`.",
        "",
        *matrix(caps_by_file),
        "",
        "## Where chatcaps disagrees with llama.cpp's labels",
        "",
        f"Compared with `{LABELS_FILE}` (llama.cpp's beliefs: thinking support, markers, forced-open generation",
        "prompt). Reasons are reviewed by hand in `docs/zoo_reviews.json`.",
        "",
        "| template | field | llama.cpp | chatcaps | reason |",
        "|---|---|---|---|---|",
    ]
    for file, field, said, ours in disagreements(caps_by_file, labels):
        reason = reviews.get(f"{file}:{field}", reviews.get(file, "not reviewed yet"))
        lines.append(f"| {file} | {field} | {_md(_cell(said))} | {_md(_cell(ours))} | {_md(_cell(reason))} |")
    return "\n".join(lines) + "\n"
