"""The jinja2 engine: transformers' chat-template environment, exactly, plus chatcaps' sandbox limits.

The environment mirrors `transformers.utils.chat_template_utils._cached_compile_jinja_template` (transformers 5.x):
`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with `loopcontrols` and the `{% generation %}`
tag, the non-escaping `tojson`, `raise_exception`, `strftime_now`, a safe `dict` and an underscore-refusing `namespace`.
The limits are added as sandbox hooks (`call_binop`, `call`) that return what jinja2 would, so output is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.parser
import jinja2.utils
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chatcaps.engines.base import DEFAULT_LIMITS, EngineName, Limits
from chatcaps.engines.builtins import strftime_now, tojson
from chatcaps.engines.minijinja_engine import MinijinjaRenderer
from chatcaps.engines.watchdog import Expired, run_with_deadline
from chatcaps.errors import (
    RenderLimitError,
    TemplateRenderError,
    TemplateSecurityError,
    TemplateSyntaxError,
)

_macro_depth: ContextVar[int] = ContextVar("chatcaps_macro_depth", default=0)
_DICT_ATTRIBUTES = frozenset(dir(dict))
_DICT_READERS = frozenset(name for name in _DICT_ATTRIBUTES if not name.startswith("_")) - {
    "clear",
    "pop",
    "popitem",
    "setdefault",
    "update",
}
"""dict's public methods but those ImmutableSandboxedEnvironment refuses (jinja2.sandbox._mutable_spec)."""
_STR_METHODS = frozenset(name for name in dir(str) if not name.startswith("_")) - {"format", "format_map"}
"""str's public methods but the two jinja2 wraps: the sandbox allows each of them as is."""


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged, as transformers' AssistantTracker does."""

    tags = {"generation"}  # noqa: RUF012 - jinja2's Extension API declares this as a class attribute

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Macro) -> str:
        return str(caller())


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


class _TemplateDict:
    """`dict` without the type's attributes, as transformers exposes it."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """A `namespace` that refuses underscore-prefixed names, as transformers' does."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute."
            )


def _power_bits(base: Any, exponent: Any) -> int:
    """About how many bits `base ** exponent` takes, for integers (0 when it cannot grow)."""
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0 or abs(base) <= 1:
        return 0
    return max(abs(base).bit_length() - 1, 1) * exponent


class _LimitedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox with two more hooks: operand size for `*`/`**`, and macro call depth."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, limits: Limits) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
        self.limits = limits
        self.filters["tojson"] = tojson
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = strftime_now
        self.globals["dict"] = _TemplateDict()
        self.globals["namespace"] = _TemplateNamespace

    # The two lookups below are the commonest operations in a chat template: `message.role` and
    # `message['content']` on plain dicts, `content.strip` on strings, `message.get`, `ns.found`, `loop.last`. They
    # answer exactly as jinja2's sandbox does, minus its general checks: a plain dict has no attribute of that name
    # (so jinja2 raises and catches an AttributeError before taking the item); a public str method but format and
    # format_map, a non-mutating dict method, a public namespace or loop attribute pass every sandbox check
    # (`is_safe_attribute`, `modifies_known_mutable`). Any other object takes jinja2's own path.

    def getattr(self, obj: Any, attribute: str) -> Any:
        kind = type(obj)
        if kind is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        if (kind is str and attribute in _STR_METHODS) or (kind is dict and attribute in _DICT_READERS):
            return getattr(obj, attribute)
        if (kind is _TemplateNamespace or kind is LoopContext) and not attribute.startswith("_"):
            try:
                value = getattr(obj, attribute)
            except AttributeError:
                return super().getattr(obj, attribute)
            return self.wrap_str_format(value) or value
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if type(obj) is dict and not (isinstance(argument, str) and argument in _DICT_ATTRIBUTES):
            try:
                return obj[argument]
            except (KeyError, TypeError):
                return self.undefined(obj=obj, name=argument)
        return super().getitem(obj, argument)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            self._check_repeat(left, right)
            self._check_repeat(right, left)
        elif _power_bits(left, right) > self.limits.max_operand_chars * 8:
            raise RenderLimitError(
                f"{left} ** {right} would exceed max_operand_chars={self.limits.max_operand_chars}",
                limit="max_operand_chars",
            )
        return super().call_binop(context, operator, left, right)

    def _check_repeat(self, sequence: Any, times: Any) -> None:
        if (
            isinstance(sequence, str | list | tuple)
            and isinstance(times, int)
            and len(sequence) * times > self.limits.max_operand_chars
        ):
            raise RenderLimitError(
                f"repeating a length-{len(sequence)} value {times} times exceeds "
                f"max_operand_chars={self.limits.max_operand_chars}",
                limit="max_operand_chars",
            )

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(__obj, Macro):
            return super().call(__context, __obj, *args, **kwargs)
        depth = _macro_depth.get()
        if depth >= __self.limits.max_recursion:
            raise RenderLimitError(
                f"macro calls nested deeper than max_recursion={__self.limits.max_recursion}", limit="max_recursion"
            )
        token = _macro_depth.set(depth + 1)
        try:
            return super().call(__context, __obj, *args, **kwargs)
        finally:
            _macro_depth.reset(token)


def _syntax_error(error: jinja2.TemplateSyntaxError, source: str, name: str) -> TemplateSyntaxError:
    """jinja2 reports only the line; the column comes from minijinja's parser when it fails on the same line,
    else it is the line's first non-blank character."""
    line = error.lineno
    lines = source.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    column = len(text) - len(text.lstrip()) + 1
    try:
        MinijinjaRenderer(source, name=name)
    except TemplateSyntaxError as located:
        if located.line == line:
            column = located.column
    return TemplateSyntaxError(error.message or str(error), template_name=name, line=line, column=column)


def _template_line(tb: TracebackType | None) -> int | None:
    """The template line of the innermost frame jinja2 rewrote to point at the template."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


class Jinja2Renderer:
    """A template compiled in transformers' environment; see the module docstring."""

    engine: EngineName = "jinja2"

    def __init__(self, source: str, *, name: str = "<template>", limits: Limits = DEFAULT_LIMITS) -> None:
        self.source = source
        self.name = name
        self.limits = limits
        self._env = _LimitedSandbox(limits)
        try:
            self._template = self._env.from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise _syntax_error(error, source, name) from error

    def undeclared_variables(self) -> frozenset[str]:
        return frozenset(jinja2.meta.find_undeclared_variables(self._env.parse(self.source)))

    def render(self, variables: Mapping[str, Any]) -> str:
        try:
            return run_with_deadline(lambda: self._collect(self._template.generate(**variables)), self.limits.time_s)
        except Expired:
            raise RenderLimitError(
                f"render ran past time_s={self.limits.time_s}", limit="time_s", template_name=self.name
            ) from None
        except RenderLimitError as error:
            error.template_name = self.name
            raise
        except RecursionError as error:
            raise RenderLimitError(
                "render exceeded Python's recursion limit", limit="max_recursion", template_name=self.name
            ) from error
        except MemoryError as error:
            raise RenderLimitError("render ran out of memory", limit="memory", template_name=self.name) from error
        except jinja2.exceptions.SecurityError as error:
            raise TemplateSecurityError(str(error), template_name=self.name) from error
        except jinja2.TemplateError as error:
            raise TemplateRenderError(
                error.message or str(error), template_name=self.name, line=_template_line(error.__traceback__)
            ) from error
        except Exception as error:
            raise TemplateRenderError(
                f"{type(error).__name__}: {error}", template_name=self.name, line=_template_line(error.__traceback__)
            ) from error

    def _collect(self, chunks: Iterator[str]) -> str:
        budget = self.limits.max_output_chars
        parts: list[str] = []
        size = 0
        for chunk in chunks:
            size += len(chunk)
            if size > budget:
                raise RenderLimitError(f"output exceeded max_output_chars={budget}", limit="max_output_chars")
            parts.append(chunk)
        return "".join(parts)
