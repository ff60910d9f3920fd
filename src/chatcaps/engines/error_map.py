"""How an engine's exceptions become chatcaps errors: one ordered table per engine, applied in one place.

Each engine lists which of its exceptions (a type, or a test on the exception) becomes which chatcaps error, first
match wins; the error is built there, from the exception and the renderer that raised it, so it is born with the
template's name and the limits it ran under, and located in the renderer's source (`locate`: the line, its text and,
where known, the span). The rules both engines share are here.

A renderer applies its table in one `except BaseException` clause (`ErrorMap.reraise`) rather than a context manager,
so a render that raises nothing pays nothing for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

import minijinja

from chatcaps.errors import (
    ChatcapsError,
    RenderLimitError,
    Span,
    TemplateError,
    TemplateRenderError,
    TemplateSyntaxError,
)

if TYPE_CHECKING:
    from chatcaps.engines.base import Renderer

Match = type[BaseException] | Callable[[BaseException], bool]
Build = Callable[[Any, "Renderer"], ChatcapsError]
"""(the engine's exception, the renderer) -> the chatcaps error."""


class ErrorMap:
    """An ordered table of (match, build) rules; an exception no rule matches goes on unchanged."""

    def __init__(self, *rules: tuple[Match, Build]) -> None:
        self.rules = rules

    def convert(self, error: BaseException, renderer: Renderer) -> ChatcapsError | None:
        for match, build in self.rules:
            if isinstance(error, match) if isinstance(match, type) else match(error):
                built = build(error, renderer)
                if isinstance(built, TemplateError):
                    place = locate(error, renderer.source, built.message)
                    return built if place is None else built.located(*place)
                return built
        return None

    def reraise(self, error: BaseException, renderer: Renderer) -> NoReturn:
        """Raise `error` as its chatcaps error (chained to it), or as itself when no rule matches."""
        converted = self.convert(error, renderer)
        if converted is None:
            raise error
        raise converted from error


def named_limit(error: RenderLimitError, renderer: Renderer) -> RenderLimitError:
    """A limit a sandbox hook hit: the hook does not know the template, so the error is built again with its name."""
    return RenderLimitError(error.message, limit=error.limit, template_name=renderer.name)


def python_recursion(error: RecursionError, renderer: Renderer) -> RenderLimitError:
    return RenderLimitError(
        "render exceeded Python's recursion limit", limit="max_recursion", template_name=renderer.name
    )


def out_of_memory(error: MemoryError, renderer: Renderer) -> RenderLimitError:
    return RenderLimitError("render ran out of memory", limit="max_memory_bytes", template_name=renderer.name)


def python_error(error: Exception, renderer: Renderer) -> TemplateRenderError:
    """Any other exception from inside a render (a filter's TypeError, a method's ValueError): its type and text."""
    return TemplateRenderError(f"{type(error).__name__}: {error}", template_name=renderer.name)


SourceSpot = tuple[int, str | None, Span | None]
"""(line, that line's text, span) in a template's source: a `TemplateError`'s `line`, `source_line` and `span` (its
`errors.Place` less the template's name, which the renderer adds)."""
_RAISE_CALL = re.compile(r"""raise_exception\s*\(\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*\)""")
"""A `raise_exception` call with one string literal: the literal's text (single- or double-quoted), escapes as
written."""


def locate(error: BaseException, source: str, message: str) -> SourceSpot | None:
    """Where in `source` the engine says `error` happened: minijinja's byte range (its line, its text, the span), else
    the template line of jinja2's traceback (a line, no span). A `raise_exception` call whose literal is `message`
    gives its span (the one such call on the line, or in the template where no line is known: minijinja hands back
    the exception a Python function raised without saying where)."""
    if isinstance(error, minijinja.TemplateError):
        if error.range is not None:
            return byte_range_place(source, error.range)
        line, cr_ends_line = error.line, False
    else:
        line, cr_ends_line = template_line(error.__traceback__), True
    call = _raise_call(source, message, line)
    if call is not None or line is None:
        return call
    text = line_text(source, line, cr_ends_line=cr_ends_line)
    return None if text is None else (line, text, None)


def line_text(source: str, line: int, *, cr_ends_line: bool) -> str | None:
    """The text of `source`'s 1-based `line` (None past the end). jinja2 ends a line at `\r\n`, `\r` or `\n` (its
    lexer's `newline_re`), minijinja at `\n` only: the two number lines alike unless a lone `\r` ends one."""
    if cr_ends_line and "\r" in source:
        source = source.replace("\r\n", "\n").replace("\r", "\n")
    lines = source.split("\n", line)  # no further than the line asked for
    return lines[line - 1].removesuffix("\r") if 0 < line <= len(lines) else None


def byte_range_place(source: str, byte_range: tuple[int, int]) -> tuple[int, str, Span]:
    """The place of minijinja's `range` (UTF-8 byte offsets into the source, end excluded): the line it starts on,
    that line's text and the range's columns in it (cut at the line's end)."""
    encoded = source.encode("utf-8")
    start, end = byte_range
    line_start = encoded.rfind(b"\n", 0, start) + 1
    line_end = encoded.find(b"\n", start)
    line_end = len(encoded) if line_end < 0 else line_end
    text = encoded[line_start:line_end].decode("utf-8", errors="replace").removesuffix("\r")
    first = len(encoded[line_start:start].decode("utf-8", errors="replace"))
    last = first + len(encoded[start : min(end, line_end)].decode("utf-8", errors="replace"))
    return encoded.count(b"\n", 0, start) + 1, text, (min(first, len(text)), min(last, len(text)))


def minijinja_syntax_error(error: minijinja.TemplateError, source: str, name: str) -> TemplateSyntaxError:
    """minijinja's syntax error at its offending token: the line, its text, the token's span and the 1-based column
    where the span starts (line 1, column 1 in the rare error without a range)."""
    message = error.detail or error.message
    if error.range is None:
        return TemplateSyntaxError(message, template_name=name, line=error.line or 1, column=1)
    line, text, span = byte_range_place(source, error.range)
    return TemplateSyntaxError(message, template_name=name, line=line, column=span[0] + 1, source_line=text, span=span)


def _raise_call(source: str, message: str, line: int | None) -> SourceSpot | None:
    """The one `raise_exception('<message>')` call in `source` (on `line` when given); None where there is none or
    more than one."""
    found = None
    for call in _RAISE_CALL.finditer(source):
        literal = call.group(1) if call.group(1) is not None else call.group(2)
        if "\\" in literal:  # as jinja2's lexer reads a string's escapes
            try:
                literal = literal.encode("ascii", "backslashreplace").decode("unicode-escape")
            except UnicodeDecodeError:  # an escape jinja2 refuses: the template did not reach this call
                continue
        if literal != message:
            continue
        start = call.start()
        place = byte_range_place(source, (len(source[:start].encode()), len(source[: call.end()].encode())))
        if line is not None and place[0] != line:
            continue
        if found is not None:
            return None
        found = place
    return found


def template_line(tb: TracebackType | None) -> int | None:
    """The template line of the innermost template frame in a jinja2 traceback (None for minijinja, whose frames are
    Rust's). jinja2 rewrites the traceback of an `Exception` so that such a frame stands at the template's line; the
    watchdog's `Expired` (a BaseException) keeps the frames of the generated code, whose line jinja2 maps back."""
    line = None
    while tb is not None:
        frame = tb.tb_frame
        template = frame.f_globals.get("__jinja_template__")
        if template is not None:
            line = template.get_corresponding_lineno(tb.tb_lineno)
        elif frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


SHARED_RULES: tuple[tuple[Match, Build], ...] = (
    (RenderLimitError, named_limit),
    (RecursionError, python_recursion),
    (MemoryError, out_of_memory),
)
"""The rules every engine ends its table with, before its own catch-all."""
