"""How an engine's exceptions become chatcaps errors: one ordered table per engine, applied in one place.

Each engine lists which of its exceptions (a type, or a test on the exception) becomes which chatcaps error, first
match wins; the error is built there, from the exception and the renderer that raised it, so it is born with the
template's name and the limits it ran under. The rules both engines share are here.

A renderer applies its table in one `except BaseException` clause (`ErrorMap.reraise`) rather than a context manager,
so a render that raises nothing pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from chatcaps.errors import ChatcapsError, RenderLimitError, TemplateRenderError

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
                return build(error, renderer)
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
    """Any other exception from inside a render (a filter's TypeError, a method's ValueError): its type and text, and
    the template line when the traceback passes through the template's code."""
    return TemplateRenderError(
        f"{type(error).__name__}: {error}", template_name=renderer.name, line=template_line(error.__traceback__)
    )


def template_line(tb: TracebackType | None) -> int | None:
    """The template line of the innermost frame jinja2 rewrote to point at the template (None for minijinja, whose
    frames are Rust's)."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


SHARED_RULES: tuple[tuple[Match, Build], ...] = (
    (RenderLimitError, named_limit),
    (RecursionError, python_recursion),
    (MemoryError, out_of_memory),
)
"""The rules every engine ends its table with, before its own catch-all."""
