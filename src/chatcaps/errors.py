"""Every exception chatcaps raises, in one tree.

    ChatcapsError                      base: catch this to catch everything chatcaps raises
    ├── SourceError                    a template could not be found or read where it was asked for
    │   └── TemplateNotFoundError      the source holds no template (or not the named one); lists what exists
    ├── TemplateError                  the template itself failed
    │   ├── TemplateSyntaxError        it does not parse (name, line, column)
    │   ├── TemplateRenderError        it raised while rendering (its own message kept, e.g. raise_exception)
    │   ├── TemplateSecurityError      it tried to leave the sandbox (attribute walk, unsafe call)
    │   └── RenderLimitError           it hit a sandbox limit (time, output size, recursion, operand size)
    ├── InputError                     the caller's input is wrong (message index and field named)
    └── ServerError                    an inference server did not answer, refused a request or sent bad JSON

Engine exceptions (jinja2's, minijinja's) become these in one place per engine; see `chatcaps.engines`.
"""

from __future__ import annotations


class ChatcapsError(Exception):
    """Base of every error chatcaps raises."""


class SourceError(ChatcapsError):
    """A template could not be loaded from where it was asked for."""


class TemplateNotFoundError(SourceError):
    """The source has no template, or not the one named; `available` lists what it has."""

    def __init__(self, message: str, *, available: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.available = available


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


class ServerError(ChatcapsError):
    """An inference server (e.g. llama-server) failed a request; `url` names the endpoint, `status` the HTTP code."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url
        self.status = status
