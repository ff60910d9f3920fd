"""The exception tree: each error survives pickling with its fields (the isolated minijinja worker sends them back
to the caller that way), a llama-server failure is a SourceError, and a template error shows its place in one format
(`pointer`). Where each engine's errors are located: tests/engines/test_error_source.py."""

from __future__ import annotations

import pickle

import pytest

from chatcaps.errors import (
    POINTER_WIDTH,
    ChatcapsError,
    InputError,
    RenderLimitError,
    ServerError,
    SourceError,
    TemplateNotFoundError,
    TemplateRenderError,
    TemplateSecurityError,
    TemplateSyntaxError,
    pointer,
)

ERRORS: list[ChatcapsError] = [
    ChatcapsError("plain"),
    SourceError("a.jinja: no such file"),
    TemplateNotFoundError("m: no chat template named 'x'", available=("default", "tool_use")),
    ServerError("HTTP 500: boom", url="http://h:1/props", status=500),
    TemplateSyntaxError("unexpected end", template_name="t.jinja", line=3, column=9),
    TemplateSyntaxError(
        "unexpected `|`", template_name="t.jinja", line=2, column=8, source_line="{{ foo(| }}", span=(7, 8)
    ),
    TemplateRenderError("roles must alternate", template_name="t.jinja", line=2),
    TemplateRenderError("boom", template_name="t.jinja", line=2, source_line="{{ raise_exception('boom') }}"),
    TemplateSecurityError("access to attribute '__class__' is unsafe", template_name="t.jinja"),
    RenderLimitError("render ran past time_s=1.0", limit="time_s", template_name="t.jinja"),
    RenderLimitError("too many", limit="max_range", line=1, source_line="{{ range(10**6) }}", span=(3, 15)),
    InputError("must be a string", index=1, field="content"),
]


@pytest.mark.parametrize("error", ERRORS, ids=[type(error).__name__ for error in ERRORS])
def test_an_error_pickles_with_its_fields(error: ChatcapsError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (str(copy), copy.args, vars(copy)) == (str(error), error.args, vars(error))


def test_a_server_error_is_a_source_error_that_says_url_status_and_message() -> None:
    error = ServerError("HTTP 500: boom", url="http://h:1/props", status=500)
    assert isinstance(error, SourceError)
    assert (str(error), error.url, error.status, error.message) == (
        "http://h:1/props: HTTP 500: boom",
        "http://h:1/props",
        500,
        "HTTP 500: boom",
    )


def test_a_pointer_underlines_the_span_below_the_numbered_line() -> None:
    error = TemplateRenderError("UnknownFunction: foo is unknown", line=12, source_line="{{ foo(| }}", span=(3, 7))
    assert error.pointer() == "  12 | {{ foo(| }}\n     |    ^^^^"
    assert str(error) == "UnknownFunction: foo is unknown"  # one line: the pointer goes under it, where it is shown


@pytest.mark.parametrize(
    ("line", "source_line", "span", "shown"),
    [
        (3, "  {{ x }}", None, "  3 |   {{ x }}"),  # a line, no span (jinja2's render errors)
        (None, None, None, ""),  # nothing known
        (1, "{% if %}", (6, 6), "  1 | {% if %}\n    |       ^"),  # an empty span still points
        (2, "\t{{ nope() }}", (4, 10), "  2 | \t{{ nope() }}\n    | \t   ^^^^^^"),  # tabs kept: the carets align
        (7, "", (0, 0), "  7 |\n    | ^"),  # the end of the template, on an empty last line
        (1, "{{ x }}  ", None, "  1 | {{ x }}"),  # trailing blanks are not shown
    ],
)
def test_pointer_shapes(line: int | None, source_line: str | None, span: tuple[int, int] | None, shown: str) -> None:
    assert pointer(line, source_line, span) == shown


def test_a_long_line_is_cut_around_the_span() -> None:
    """A template written on one line: POINTER_WIDTH characters around the span, `...` where it was cut."""
    line = "a" * 300 + "{{ foo(| }}" + "b" * 300
    assert len(line) > POINTER_WIDTH
    shown = pointer(1, line, (307, 308))
    first = 307 - POINTER_WIDTH // 3
    assert shown == (f"  1 | ...{line[first : first + POINTER_WIDTH]}...\n    | {' ' * (3 + POINTER_WIDTH // 3)}^")
    assert pointer(1, line, None) == f"  1 | {line[:POINTER_WIDTH]}..."
    tail = "a" * 300 + "{{ foo(| }}"  # near the end: the window ends with the line, cut only before
    assert pointer(1, tail, (303, 307)) == (
        f"  1 | ...{tail[-POINTER_WIDTH:]}\n    | {' ' * (3 + 303 - (len(tail) - POINTER_WIDTH))}^^^^"
    )


def test_a_template_errors_location_is_json() -> None:
    error = TemplateSyntaxError(
        "unexpected `|`", template_name="t.jinja", line=2, column=8, source_line="{{ foo(| }}", span=(7, 8)
    )
    assert error.location() == {"name": "t.jinja", "line": 2, "source_line": "{{ foo(| }}", "span": [7, 8]}
    assert TemplateRenderError("x").location() == {"name": None, "line": None, "source_line": None, "span": None}


def test_located_is_a_copy_at_that_place() -> None:
    error = RenderLimitError("too many", limit="max_range", template_name="t.jinja")
    located = error.located(2, "{{ range(10**6) }}", (3, 15))
    assert (type(located), located.args, vars(located)) == (
        RenderLimitError,
        ("too many",),
        {
            "message": "too many",
            "template_name": "t.jinja",
            "line": 2,
            "source_line": "{{ range(10**6) }}",
            "span": (3, 15),
            "limit": "max_range",
        },
    )
    assert (error.line, error.source_line, error.span) == (None, None, None)
