"""Every exception chatcaps raises, in one tree.

    ChatcapsError                      base: catch this to catch everything chatcaps raises
    ├── SourceError                    a template could not be found or read where it was asked for
    │   ├── TemplateNotFoundError      the source holds no template (or not the named one); lists what exists
    │   └── ServerError                a llama-server did not answer, refused a request or sent bad JSON (URL, status)
    ├── TemplateError                  the template itself failed
    │   ├── TemplateSyntaxError        it does not parse (name, line, column)
    │   ├── TemplateRenderError        it raised while rendering (its own message kept, e.g. raise_exception)
    │   ├── TemplateSecurityError      it tried to leave the sandbox (attribute walk, unsafe call)
    │   └── RenderLimitError           it hit a sandbox limit (time, output size, recursion, operand size)
    └── InputError                     the caller's input is wrong (message index and field named)

`ServerError` is every failure of the llama-server transport (`chatcaps.transport`), for templates read from `/props`
and for `LlamaServerClient`'s requests alike; it is a `SourceError` so that `except SourceError` around
`from_llama_server` catches a server that is down, as it catches a file that is missing.

Engine exceptions (jinja2's, minijinja's) become these through one table per engine (`chatcaps.engines.error_map`),
each built with its template's name. Every error pickles with its fields (the isolated minijinja worker sends them).
"""

from __future__ import annotations

from typing import Any


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
    """A llama-server request failed; `url` names the endpoint, `status` the HTTP code when one came back."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {message}")
        self.message = message
        self.url = url
        self.status = status


class TemplateError(ChatcapsError):
    """The template failed; `template_name` says which one."""

    def __init__(self, message: str, *, template_name: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.template_name = template_name


class TemplateSyntaxError(TemplateError):
    """The template does not parse; `line` and `column` are 1-based."""

    def __init__(self, message: str, *, template_name: str | None, line: int, column: int) -> None:
        super().__init__(message, template_name=template_name)
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return f"{self.template_name or '<template>'}:{self.line}:{self.column}: {self.message}"


class TemplateRenderError(TemplateError):
    """The template raised while rendering; `message` is the template's own text."""

    def __init__(self, message: str, *, template_name: str | None = None, line: int | None = None) -> None:
        super().__init__(message, template_name=template_name)
        self.line = line


class TemplateSecurityError(TemplateError):
    """The template reached for something the sandbox forbids."""


class RenderLimitError(TemplateError):
    """A sandbox limit stopped the render; `limit` names it (see `chatcaps.Limits`)."""

    def __init__(self, message: str, *, limit: str, template_name: str | None = None) -> None:
        super().__init__(message, template_name=template_name)
        self.limit = limit


class InputError(ChatcapsError, ValueError):
    """The caller's input is wrong; `index` and `field` locate it when it is inside a message."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None) -> None:
        where = "" if index is None else f"messages[{index}]" + (f".{field}" if field else "") + ": "
        super().__init__(where + message)
        self.index = index
        self.field = field
