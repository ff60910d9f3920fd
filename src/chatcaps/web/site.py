"""The zoo as a static site (`chatcaps zoo --html OUT/`): a matrix page and one page per template, opened from disk.

Built from the same rows as docs/zoo.md (`chatcaps.matrix`, `chatcaps.zoo.disagreements`): rows in, files out
(`site_files` returns every file's text by its path; the CLI writes them). A template's page renders the canonical
contexts, so it is the slow part; `site_files` takes a `map` for the CLI to run the pages in worker processes.
Templates are untrusted data: every value reaches the HTML through jinja2's autoescaping (or `markupsafe.escape`), and
a render that fails shows its error.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from markupsafe import Markup, escape

from chatcaps import sources
from chatcaps.caps import Caps
from chatcaps.contexts import Context, load_contexts
from chatcaps.engines import EngineName
from chatcaps.errors import ChatcapsError
from chatcaps.matrix import (
    CONTROL_COLUMNS,
    MATRIX_COLUMNS,
    call_format_line,
    caps_groups,
    control_rows,
    json_text,
    matrix_rows,
    report_lines,
)
from chatcaps.outcome import Outcome, capture, engine_call
from chatcaps.render import ChatTemplate
from chatcaps.web import environment, static

__all__ = [
    "ASSETS",
    "FACETS",
    "SITE_CONTEXTS",
    "Facet",
    "SiteTemplate",
    "diff_segments",
    "index_page",
    "page_path",
    "site_files",
    "template_page",
]

ASSETS = ("base.css", "site.css", "site.js")
"""The shipped assets every page links to, copied beside index.html."""
SITE_CONTEXTS = ("simple", "system", "tool_call_string_arguments", "multi_turn_reasoning")
"""The canonical contexts a template's page renders: a plain turn, a system turn, a tool call, reasoning history."""
_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

Map = Callable[..., Iterable[Any]]
"""`map` or a process pool's `map`: how `site_files` runs the template pages."""


@dataclass(frozen=True)
class SiteTemplate:
    """One template of the folder being shown, as `chatcaps zoo` read it."""

    name: str
    text: str
    bos_token: str = ""
    eos_token: str = ""


def _yes(on: bool) -> tuple[str, ...]:
    return ("yes",) if on else ("no",)


def _shape(caps: Caps) -> str:
    """How a reply's calls are read: the call format's shape, "not read" where it fits none, "-" with no format."""
    calls = caps.tools.call_format
    return "-" if calls is None else calls.shape or "not read"


@dataclass(frozen=True)
class Facet:
    """One filter of the matrix page: a row's values of it, read from the template's Caps."""

    key: str
    label: str
    values: Callable[[Caps], tuple[str, ...]]


FACETS = (
    Facet("calls", "tool calls", lambda caps: _yes(caps.tools.calls)),
    Facet("definitions", "tool definitions", lambda caps: _yes(caps.tools.definitions)),
    Facet("system", "system role", lambda caps: _yes(caps.roles.system)),
    Facet("typed", "typed content", lambda caps: _yes(caps.content.typed)),
    Facet("reasoning", "reasoning format", lambda caps: (caps.reasoning.format or "none",)),
    Facet("state", "default state", lambda caps: (caps.reasoning.default_state,)),
    Facet("switch", "thinking switch", lambda caps: tuple(c.kind for c in caps.reasoning.controls) or ("none",)),
    Facet(
        "shape", "call shape", lambda caps: (calls.shape or "none",) if (calls := caps.tools.call_format) else ("-",)
    ),
)
"""The matrix page's filters; a row matches a value it holds (a template with two switches holds two)."""


def page_path(name: str) -> str:
    """The template's page, relative to index.html: its name where that is a safe file name, else the name made
    safe plus a digest of it, so two names never share a page."""
    safe = _UNSAFE.sub("_", name)
    if safe != name or safe.startswith("."):
        safe += "-" + hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"t/{safe}.html"


def diff_segments(old: str, new: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Both texts cut into (text, mark) runs, word by word: mark "removed" where only `old` has the text, "added"
    where only `new` has it, "" where both do. The shared head and tail are set aside before matching: prompts with
    and without polyfills mostly agree, and matching is quadratic in what is left."""
    first, second = _TOKENS.findall(old), _TOKENS.findall(new)
    head = 0
    while head < min(len(first), len(second)) and first[head] == second[head]:
        head += 1
    tail = 0
    while tail < min(len(first), len(second)) - head and first[-1 - tail] == second[-1 - tail]:
        tail += 1
    left: list[tuple[str, str]] = [("".join(first[:head]), "")] if head else []
    right = list(left)
    rest = first[head : len(first) - tail], second[head : len(second) - tail]
    middle = difflib.SequenceMatcher(None, *rest, autojunk=False)
    for tag, a, b, c, d in middle.get_opcodes():
        same = tag == "equal"
        left += [("".join(first[head + a : head + b]), "" if same else "removed")] if b > a else []
        right += [("".join(second[head + c : head + d]), "" if same else "added")] if d > c else []
    if tail:
        left.append(("".join(first[len(first) - tail :]), ""))
        right.append(("".join(second[len(second) - tail :]), ""))
    return left, right


def _marked(segments: Sequence[tuple[str, str]]) -> Markup:
    """Runs as HTML: a marked run in a `<mark>` of its class, every text escaped."""
    return Markup("").join(
        Markup('<mark class="{}">{}</mark>').format(mark, text) if mark else escape(text) for text, mark in segments
    )


@dataclass(frozen=True)
class _Render:
    """One context on one template's page: both prompts (marked where they differ) or the errors, and the report."""

    context: Context
    raw: Markup
    polyfilled: Markup
    raw_error: str | None
    polyfilled_error: str | None
    report: str
    applied: tuple[str, ...]
    """The polyfills that changed the request, named for the report's summary."""


def _polyfilled(template: ChatTemplate, context: Context) -> tuple[Outcome, str, tuple[str, ...]]:
    try:
        result = template.render_context(context)
    except ChatcapsError as error:
        return Outcome(None, type(error).__name__, str(error)), "", ()
    applied = tuple(dict.fromkeys(record.polyfill for record in result.applied))
    return Outcome(result.prompt), "\n".join(report_lines(result)), applied


def _error(outcome: Outcome) -> str | None:
    return f"{outcome.error_type}: {outcome.error}" if outcome.raised else None


def _render(template: ChatTemplate, context: Context) -> _Render:
    tokens = {"bos_token": template.bos_token, "eos_token": template.eos_token}
    raw = capture(engine_call(template.renderer, context, **tokens), ChatcapsError)
    polyfilled, report, applied = _polyfilled(template, context)
    if raw.raised or polyfilled.raised:  # nothing to compare: a prompt beside an error is shown as it is
        left, right = [(raw.output or "", "")], [(polyfilled.output or "", "")]
    else:
        left, right = diff_segments(raw.output or "", polyfilled.output or "")
    return _Render(context, _marked(left), _marked(right), _error(raw), _error(polyfilled), report, applied)


def _response_template(template: ChatTemplate) -> str:
    try:
        return json.dumps(template.response_template(), indent=2, ensure_ascii=False)
    except ChatcapsError as error:
        return f"{type(error).__name__}: {error}"


def template_page(
    template: SiteTemplate, disagreements: Sequence[tuple[str, str, str, str]], *, engine: EngineName = "jinja2"
) -> str:
    """The template's page: its Caps as `chatcaps detect` groups them, its controls, call format and end of turn, its
    `response_template`, the `SITE_CONTEXTS` rendered raw and with polyfills, and llama.cpp's differing labels."""
    source = sources.from_str(template.text, name=template.name)
    compiled = ChatTemplate(source, bos_token=template.bos_token, eos_token=template.eos_token, engine=engine)
    caps = compiled.caps
    by_name = {context.name: context for context in load_contexts()}
    contexts = [by_name[name] for name in SITE_CONTEXTS]
    (row,) = matrix_rows({template.name: caps})
    call_format = caps.tools.call_format
    return (
        environment()
        .get_template("site_template.html")
        .render(
            root="../",
            name=template.name,
            engine=engine,
            glance=list(zip(MATRIX_COLUMNS[1:], row[1:], strict=True)),
            header=[("bos_token", json_text(template.bos_token)), ("eos_token", json_text(template.eos_token))],
            groups=caps_groups(caps),
            control_columns=CONTROL_COLUMNS,
            controls=control_rows(caps),
            call_format=call_format_line(caps),
            call_parts=[(part, json_text(value)) for part, value in asdict(call_format).items()] if call_format else [],
            end_of_turn=json_text(caps.end_of_turn),
            response_template=_response_template(compiled),
            renders=[_render(compiled, context) for context in contexts],
            disagreements=[row for row in disagreements if row[0] == template.name],
            probe_errors=[(error.probe, error.error) for error in caps.probe_errors],
            source=template.text,
        )
    )


def index_page(
    caps_by_name: Mapping[str, Caps],
    failed: Mapping[str, str],
    disagreements: Sequence[tuple[str, str, str, str]],
    *,
    title: str,
) -> str:
    """The matrix page: `matrix_rows`' cells, each row carrying its `FACETS` values for the filters."""
    values = {name: [facet.values(caps) for facet in FACETS] for name, caps in caps_by_name.items()}
    options = [sorted({value for held in values.values() for value in held[index]}) for index in range(len(FACETS))]
    return (
        environment()
        .get_template("site_index.html")
        .render(
            root="",
            title=title,
            columns=MATRIX_COLUMNS,
            rows=[
                (
                    row,
                    page_path(row[0]),
                    [(facet.key, "|".join(held)) for facet, held in zip(FACETS, values[row[0]], strict=True)],
                )
                for row in matrix_rows(caps_by_name)
            ],
            facets=list(zip(FACETS, options, strict=True)),
            failed=sorted(failed.items()),
            disagreements=[(row, page_path(row[0])) for row in disagreements],
        )
    )


def site_files(
    templates: Sequence[SiteTemplate],
    caps_by_name: Mapping[str, Caps],
    failed: Mapping[str, str],
    disagreements: Sequence[tuple[str, str, str, str]],
    *,
    title: str,
    engine: EngineName = "jinja2",
    map_pages: Map = map,
) -> dict[str, str]:
    """Every file of the site by its path under OUT: index.html, the `ASSETS`, and a page per template with Caps
    (those in `failed` have none; the index lists them)."""
    shown = [template for template in templates if template.name in caps_by_name]
    pages = map_pages(partial(template_page, disagreements=disagreements, engine=engine), shown)
    files = {"index.html": index_page(caps_by_name, failed, disagreements, title=title)}
    files |= {name: static(name) for name in ASSETS}
    files |= {page_path(template.name): page for template, page in zip(shown, pages, strict=True)}
    return files
