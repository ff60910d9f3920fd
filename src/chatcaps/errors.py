"""Every exception chatcaps raises, in one tree.

    ChatcapsError                      base: catch this to catch everything chatcaps raises
    ├── SourceError                    a template could not be found or read where it was asked for
    │   ├── TemplateNotFoundError      the source holds no template (or not the named one); lists what exists
    │   └── ServerError                a llama-server did not answer, refused a request or sent bad JSON (URL, status)
    ├── TemplateError                  the template itself failed (its line, the line's text, a span: where known)
    │   ├── TemplateSyntaxError        it does not parse (name, line, column)
    │   ├── TemplateRenderError        it raised while rendering (its own message kept, e.g. raise_exception)
    │   ├── TemplateSecurityError      it tried to leave the sandbox (attribute walk, unsafe call)
    │   └── RenderLimitError           it hit a sandbox limit (time, output size, recursion, operand size)
    └── InputError                     the caller's input is wrong (message index and field named)

`ServerError` is every failure of the llama-server transport (`chatcaps.transport`), for templates read from `/props`
and for `LlamaServerClient`'s requests alike; it is a `SourceError` so that `except SourceError` around
`from_llama_server` catches a server that is down, as it catches a file that is missing.

Engine exceptions (jinja2's, minijinja's) become these through one table per engine (`chatcaps.engines.error_map`),
each built with its template's name and located in its source there (`TemplateError.located`); `pointer()` shows the
place under the message, as minijinja and rustc do. Every error pickles with its fields (the isolated minijinja worker
sends them).
"""

from __future__ import annotations

from typing import Any, Self, TypedDict, Unpack, cast


class ChatcapsError(Exception):
    """Base of every error chatcaps raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception pickles as `cls(*args)`, which keyword-only fields break: rebuild from args, then restore them.
        return (_rebuild, (type(self), self.args), self.__dict__)


def _rebuild(kind: type[ChatcapsError], args: tuple[Any, ...]) -> ChatcapsError:
    return kind.__new__(kind, *args)


class SourceError(ChatcapsError):
    """A template could not be loaded from where it was asked for."""


class TemplateNotFoundError(SourceError):
    """The source has no template, or not the one named; `available` lists what it has."""

    def __init__(self, message: str, *, available: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.available = available


class ServerError(SourceError):
    """A llama-server request failed; `url` names the endpoint, `status` the HTTP code when one came back, `kind` the
    error type the server named (llama-server's `exceed_context_size_error`, ...)."""

    def __init__(self, message: str, *, url: str, status: int | None = None, kind: str | None = None) -> None:
        super().__init__(f"{url}: {message}")
        self.message = message
        self.url = url
        self.status = status
        self.kind = kind


Span = tuple[int, int]
"""(start, end) columns of the offending text within its line: 0-based, end excluded (`source_line[start:end]`)."""


class Place(TypedDict, total=False):
    """Where in a template an error was raised, each part None (or left out) where the engine cannot tell."""

    template_name: str | None
    line: int | None
    """1-based."""
    source_line: str | None
    """The line's text."""
    span: Span | None


POINTER_WIDTH = 120
"""The most characters of a template line a pointer shows: a longer line (a template written on one line) is cut
around the span, so that a terminal or a log shows the place rather than the whole template."""


class TemplateError(ChatcapsError):
    """The template failed; `template_name` says which one. Where the engine says where, `line` (1-based) is the
    line, `source_line` its text and `span` the offending text in it (`Span`); each is None where it is not known
    (docs/engines.md says what each engine knows). `pointer()` shows the place, `location()` gives it as JSON."""

    def __init__(self, message: str, **place: Unpack[Place]) -> None:
        super().__init__(message)
        self.message = message
        self.template_name = place.get("template_name")
        self.line = place.get("line")
        self.source_line = place.get("source_line")
        self.span = place.get("span")

    def located(self, line: int, source_line: str | None, span: Span | None) -> Self:
        """A copy of this error at that place: an engine's error table locates each error it builds (`error_map`)."""
        copy = _rebuild(type(self), self.args)
        copy.__dict__.update(vars(self), line=line, source_line=source_line, span=span)
        return cast("Self", copy)

    def pointer(self) -> str:
        """The offending line under its number, the span underlined, as minijinja and rustc print it (lines without
        a newline at the end; empty when the line is not known):

              12 | {{ foo(| }}
                 |        ^
        """
        return pointer(self.line, self.source_line, self.span)

    def location(self) -> dict[str, Any]:
        """The template and the place, as JSON: `{"name", "line", "source_line", "span": [start, end]}` (None for
        what is not known)."""
        return {
            "name": self.template_name,
            "line": self.line,
            "source_line": self.source_line,
            "span": None if self.span is None else list(self.span),
        }


def pointer(line: int | None, source_line: str | None, span: Span | None) -> str:
    """`TemplateError.pointer`'s text, the one place it is formatted; a line longer than `POINTER_WIDTH` is shown
    cut around the span, `...` marking each cut end."""
    if line is None or source_line is None:
        return ""
    start, end = span or (0, 0)
    first = max(0, min(start - POINTER_WIDTH // 3, len(source_line) - POINTER_WIDTH))
    last = first + POINTER_WIDTH
    head = "..." if first else ""
    shown = head + source_line[first:last] + ("..." if last < len(source_line) else "")
    number = str(line)
    lines = [f"  {number} | {shown}".rstrip()]
    if span is not None:
        column = len(head) + start - first
        under = "".join("\t" if char == "\t" else " " for char in shown[:column])  # tabs kept, so the carets align
        lines.append(f"  {' ' * len(number)} | {under}{'^' * max(1, min(end, last) - start)}")
    return "\n".join(lines)


class TemplateSyntaxError(TemplateError):
    """The template does not parse; `line` and `column` are 1-based (`column` is `span`'s start plus one where the
    span is known)."""

    def __init__(
        self,
        message: str,
        *,
        template_name: str | None,
        line: int,
        column: int,
        source_line: str | None = None,
        span: Span | None = None,
    ) -> None:
        super().__init__(message, template_name=template_name, line=line, source_line=source_line, span=span)
        self.line: int = line  # always known here: narrowed for type checkers
        self.column = column

    def __str__(self) -> str:
        return f"{self.template_name or '<template>'}:{self.line}:{self.column}: {self.message}"


class TemplateRenderError(TemplateError):
    """The template raised while rendering; `message` is the template's own text."""


class TemplateSecurityError(TemplateError):
    """The template reached for something the sandbox forbids."""


class RenderLimitError(TemplateError):
    """A sandbox limit stopped the render; `limit` names it (see `chatcaps.Limits`)."""

    def __init__(self, message: str, *, limit: str, **place: Unpack[Place]) -> None:
        super().__init__(message, **place)
        self.limit = limit


class InputError(ChatcapsError, ValueError):
    """The caller's input is wrong; `index` and `field` locate it when it is inside a message."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None) -> None:
        where = "" if index is None else f"messages[{index}]" + (f".{field}" if field else "") + ": "
        super().__init__(where + message)
        self.index = index
        self.field = field
