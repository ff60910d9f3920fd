"""Every template error carries its place in the source: the 1-based `line`, that line's text (`source_line`) and the
`span` of the offending text in it (0-based columns, end excluded), each None where the engine does not say.

The engines differ (docs/engines.md, "Errors"): minijinja knows the span of every error its Rust core raises; jinja2
knows only the line (its tree has no columns), and borrows minijinja's span for a syntax error minijinja refuses on
the same line. A `raise_exception` call whose message is a literal is found in the source on both engines (minijinja
hands back an exception a Python function raised without saying where); an exception from one of chatcaps' Python
filters on minijinja (`indent`, `tojson`, `sum`, `strftime_now`) has no place.
"""

from __future__ import annotations

import pickle
from typing import Any

import minijinja
import pytest

from chatcaps.engines import DEFAULT_LIMITS, EngineName, Limits, compile_template
from chatcaps.engines.error_map import minijinja_syntax_error
from chatcaps.errors import (
    RenderLimitError,
    TemplateError,
    TemplateRenderError,
    TemplateSecurityError,
    TemplateSyntaxError,
)

Place = tuple[int | None, str | None, tuple[int, int] | None]
NOWHERE: Place = (None, None, None)

SYNTAX = "line one\n{{ foo(| }}\n"
RAISES = "hi\n{{ raise_exception('boom') }}\n"
TWO_RAISES = "{% if x %}{{ raise_exception('boom') }}{% endif %}\n{{ raise_exception('boom') }}"
COMPUTED = "a\n{{ raise_exception('Unknown role: ' + x) }}"
ESCAPED = "{{ raise_exception('it\\'s') }}"
UNDEFINED_CALL = "a\n  {{ nope() }}\n"
UNKNOWN_FILTER = "a\n{{ x | nofilter }}"
NATIVE_FILTER = "a\n\n{{ [1] | join(1, 2, 3) }}"
PYTHON_FILTER = "a\nb\n{{ 'x' | indent('a', 'b', 'c', 'd', 'e') }}\n"
ATTRIBUTE_WALK = "a\n{{ x.__class__.__mro__ }}"
DIVISION = "x\n{{ 1 // 0 }}"
RANGE = "x\n{% for i in range(1000000) %}{% endfor %}"
RECURSION = "{% macro f() %}{{ f() }}{% endmacro %}\n{{ f() }}"
NON_ASCII = "ééé {{ nope() }}"
GENERATION = "{% generation %}{{ nope() }}{% endgeneration %}"
LONE_CR = "a\rb\r{{ nope() }}"

# (case, source, engine, error type, (line, source_line, span))
CASES: list[Any] = [
    ("syntax", SYNTAX, "jinja2", TemplateSyntaxError, (2, "{{ foo(| }}", (7, 8))),
    pytest.param("syntax", SYNTAX, "minijinja", TemplateSyntaxError, (2, "{{ foo(| }}", (7, 8))),
    ("raise_exception", RAISES, "jinja2", TemplateRenderError, (2, "{{ raise_exception('boom') }}", (3, 26))),
    ("raise_exception", RAISES, "minijinja", TemplateRenderError, (2, "{{ raise_exception('boom') }}", (3, 26))),
    # jinja2's line picks the call among those with the same message; minijinja, with no line, cannot.
    ("same message twice", TWO_RAISES, "jinja2", TemplateRenderError, (1, TWO_RAISES.split("\n")[0], (13, 36))),
    ("same message twice", TWO_RAISES, "minijinja", TemplateRenderError, NOWHERE),
    # A message built at render time is no literal: jinja2 has the line, minijinja nothing.
    ("computed message", COMPUTED, "jinja2", TemplateRenderError, (2, COMPUTED.split("\n")[1], None)),
    ("computed message", COMPUTED, "minijinja", TemplateRenderError, NOWHERE),
    ("escaped literal", ESCAPED, "jinja2", TemplateRenderError, (1, ESCAPED, (3, 27))),
    ("escaped literal", ESCAPED, "minijinja", TemplateRenderError, (1, ESCAPED, (3, 27))),
    ("undefined call", UNDEFINED_CALL, "jinja2", TemplateRenderError, (2, "  {{ nope() }}", None)),
    ("undefined call", UNDEFINED_CALL, "minijinja", TemplateRenderError, (2, "  {{ nope() }}", (5, 11))),
    # jinja2 refuses an unknown filter when it compiles (minijinja does not fail on that line: no span).
    ("unknown filter", UNKNOWN_FILTER, "jinja2", TemplateSyntaxError, (2, "{{ x | nofilter }}", None)),
    ("unknown filter", UNKNOWN_FILTER, "minijinja", TemplateRenderError, (2, "{{ x | nofilter }}", (7, 15))),
    ("bad filter arguments", NATIVE_FILTER, "jinja2", TemplateRenderError, (3, "{{ [1] | join(1, 2, 3) }}", None)),
    (
        "bad filter arguments",
        NATIVE_FILTER,
        "minijinja",
        TemplateRenderError,
        (3, "{{ [1] | join(1, 2, 3) }}", (9, 22)),
    ),
    ("python filter", PYTHON_FILTER, "jinja2", TemplateRenderError, (3, PYTHON_FILTER.split("\n")[2], None)),
    ("python filter", PYTHON_FILTER, "minijinja", TemplateRenderError, NOWHERE),
    # jinja2's sandbox refuses the walk; minijinja finds no such attribute, and says so with its span.
    ("attribute walk", ATTRIBUTE_WALK, "jinja2", TemplateSecurityError, (2, "{{ x.__class__.__mro__ }}", None)),
    ("attribute walk", ATTRIBUTE_WALK, "minijinja", TemplateRenderError, (2, "{{ x.__class__.__mro__ }}", (4, 22))),
    ("division by zero", DIVISION, "jinja2", TemplateRenderError, (2, "{{ 1 // 0 }}", None)),
    ("division by zero", DIVISION, "minijinja", TemplateRenderError, (2, "{{ 1 // 0 }}", (3, 9))),
    ("range limit", RANGE, "jinja2", RenderLimitError, (2, RANGE.split("\n")[1], None)),
    ("range limit", RANGE, "minijinja", RenderLimitError, (2, RANGE.split("\n")[1], (12, 26))),
    ("recursion limit", RECURSION, "jinja2", RenderLimitError, (1, RECURSION.split("\n")[0], None)),
    ("recursion limit", RECURSION, "minijinja", RenderLimitError, (1, RECURSION.split("\n")[0], (18, 21))),
    # Columns count characters, not minijinja's UTF-8 bytes.
    ("non-ASCII before", NON_ASCII, "jinja2", TemplateRenderError, (1, NON_ASCII, None)),
    ("non-ASCII before", NON_ASCII, "minijinja", TemplateRenderError, (1, NON_ASCII, (7, 13))),
    # minijinja renders `{% generation %}` as another tag of the same length: the line shown is the template's own.
    ("generation tag", GENERATION, "jinja2", TemplateRenderError, (1, GENERATION, None)),
    ("generation tag", GENERATION, "minijinja", TemplateRenderError, (1, GENERATION, (19, 25))),
    # jinja2 ends a line at a lone carriage return too, minijinja at a newline only (`\r\n` is one break to both).
    ("lone carriage return", LONE_CR, "jinja2", TemplateRenderError, (3, "{{ nope() }}", None)),
    ("lone carriage return", LONE_CR, "minijinja", TemplateRenderError, (1, LONE_CR, (7, 13))),
    ("CRLF", "a\r\n{{ nope() }}\r\n", "jinja2", TemplateRenderError, (2, "{{ nope() }}", None)),
    ("CRLF", "a\r\n{{ nope() }}\r\n", "minijinja", TemplateRenderError, (2, "{{ nope() }}", (3, 9))),
]


def _failure(source: str, engine: EngineName, limits: Limits = DEFAULT_LIMITS) -> TemplateError:
    with pytest.raises(TemplateError) as raised:
        compile_template(source, engine=engine, name="t.jinja", limits=limits).render({"x": "s"})
    return raised.value


def _place(error: TemplateError) -> Place:
    return error.line, error.source_line, error.span


@pytest.mark.parametrize(("case", "source", "engine", "kind", "place"), CASES)
def test_an_error_carries_its_place(
    case: str, source: str, engine: EngineName, kind: type[TemplateError], place: Place
) -> None:
    error = _failure(source, engine)
    assert (type(error), error.template_name, _place(error)) == (kind, "t.jinja", place)


def test_the_place_survives_the_isolated_worker() -> None:
    error = _failure(UNDEFINED_CALL, "minijinja", Limits(isolate=True))
    assert (type(error), _place(error)) == (TemplateRenderError, (2, "  {{ nope() }}", (5, 11)))


@pytest.mark.parametrize("engine", ["jinja2", "minijinja"])
def test_a_time_limit_points_at_the_line_it_stopped_on(engine: EngineName) -> None:
    """jinja2's watchdog interrupts the generated code, whose line jinja2 maps back; minijinja's fuel runs out on a
    line, at the span of the instruction it ran out on where minijinja gives one (which depends on the fuel). The loop
    prints nothing: between two printed chunks the watchdog may stop chatcaps' loop that collects them, no line."""
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    error = _failure(f"x\n{loop}\n", engine, Limits(time_s=0.2))
    assert isinstance(error, RenderLimitError)
    assert (error.limit, error.line, error.source_line) == ("time_s", 2, loop)
    assert error.span is None if engine == "jinja2" else error.span is None or error.span[1] <= len(loop)


def test_a_syntax_errors_column_is_its_spans_start() -> None:
    """jinja2's column and span are minijinja's where minijinja refuses the same line, else the first non-blank
    character and no span."""
    error = compile_error("a\n  {{ x.}}\n")
    assert (error.line, error.column, error.source_line, error.span) == (2, 8, "  {{ x.}}", (7, 9))
    error = compile_error("a\n  {{ x | nofilter }}\n")
    assert (error.line, error.column, error.source_line, error.span) == (2, 3, "  {{ x | nofilter }}", None)


def compile_error(source: str) -> TemplateSyntaxError:
    with pytest.raises(TemplateSyntaxError) as raised:
        compile_template(source, engine="jinja2", name="t.jinja")
    return raised.value


def test_minijinja_syntax_error_is_located_by_its_byte_range() -> None:
    env = minijinja.Environment()
    with pytest.raises(minijinja.TemplateError) as raised:
        env.add_template("t", "é\n  {{ nope(  }}")
    error = minijinja_syntax_error(raised.value, "é\n  {{ nope(  }}", "t.jinja")
    assert (error.line, error.column, error.source_line, error.span, str(error)) == (
        2,
        13,
        "  {{ nope(  }}",
        (12, 13),
        "t.jinja:2:13: unexpected `}`",
    )


@pytest.mark.parametrize("engine", ["jinja2", "minijinja"])
def test_a_located_error_pickles_with_its_place(engine: EngineName) -> None:
    error = _failure(RAISES, engine)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), vars(copy), copy.pointer()) == (type(error), vars(error), error.pointer())
