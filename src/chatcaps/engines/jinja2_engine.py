"""The jinja2 engine: transformers' chat-template environment, exactly, plus chatcaps' sandbox limits.

The environment mirrors `transformers.utils.chat_template_utils._cached_compile_jinja_template` (transformers 5.x):
`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with `loopcontrols` and the `{% generation %}`
tag, the non-escaping `tojson`, `raise_exception`, `strftime_now`, a safe `dict` and an underscore-refusing `namespace`.
The limits are added as sandbox hooks that return what jinja2 would, so output is unchanged: `call_binop` (sizes of
`*`, `**`, `+`, `%`), `call` (macro depth, the str methods that build strings), `concat_values` (`~`, through a code
generator that routes it there), `concat` (captured blocks, macro output), `finalize` (what `{{ }}` prints), wrapped
filters, and `str.format`'s formatter. The sizes are estimated before the value is built (`chatcaps.engines.bounds`).
Printing an object that is not data (a function, a class, a generator) shows `<TypeName>` instead of its Python repr.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextvars import ContextVar
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.parser
import jinja2.utils
import minijinja
import orjson
from jinja2.compiler import Frame, optimizeconst
from jinja2.filters import make_attrgetter
from jinja2.lexer import Lexer
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEnvironment,
    SandboxedEscapeFormatter,
    SandboxedFormatter,
)
from markupsafe import Markup

from chatcaps.engines import bounds
from chatcaps.engines.base import DEFAULT_LIMITS, EngineName, Limits, Renderer
from chatcaps.engines.builtins import strftime_now, strftime_size
from chatcaps.engines.codegen import FastCodeGenerator
from chatcaps.engines.error_map import SHARED_RULES, ErrorMap, SourceSpot, byte_range_place, line_text, python_error
from chatcaps.engines.lexer import fast_lexer
from chatcaps.engines.minijinja_engine import MinijinjaRenderer
from chatcaps.engines.parser import FastParser
from chatcaps.engines.watchdog import Expired, OverMemory, run_with_deadline
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
_GROWING_STR_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "translate", "join"})
"""The str methods whose result can be far longer than the string: `_LimitedSandbox._check_string_method` sizes
them, and no other call of a str method needs it."""
_PLAIN_OWNERS = frozenset({str, dict})
_DATA = frozenset({str, int, bool, float, type(None), list, dict})
_INDEXES = frozenset({int, slice})
_STR_ONLY = frozenset({str})


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged, as transformers' AssistantTracker does."""

    tags = {"generation"}  # noqa: RUF012 - jinja2's Extension API declares this as a class attribute

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Macro) -> str:
        return str(caller())


TRANSFORMERS_SYNTAX: Mapping[str, Any] = types.MappingProxyType(
    {"trim_blocks": True, "lstrip_blocks": True, "extensions": (GenerationTag, jinja2.ext.loopcontrols)}
)
"""The environment options transformers compiles chat templates with: every jinja2 environment that reads a
template's source (the engine, the candidate reader) takes these."""


def _call_as_jinja2(
    environment: jinja2.Environment, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`function(*args, **kwargs)` exactly as the sandbox's `call` and `Context.call` make it, for a C method of
    plain data or a macro: the sandbox finds either safe (neither is marked unsafe), so all that is left of those two
    calls is dropping the loop and block variables jinja2 adds to each call made in a loop or block (and, for a
    macro, passing the evaluation context first: the caller does that)."""
    kwargs.pop("_block_vars", None)
    kwargs.pop("_loop_vars", None)
    try:
        return function(*args, **kwargs)
    except StopIteration:
        return environment.undefined("value was undefined because a callable raised a StopIteration exception")


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


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str, default: Any) -> Any:
    """A filter's or method's argument, given by position (after the value) or by name."""
    return args[index] if index < len(args) else kwargs.get(name, default)


Arguments = tuple[Any, tuple[Any, ...], dict[str, Any]]
"""A filter's value, its other arguments, its keyword arguments."""
Check = Callable[[Any, tuple[Any, ...], dict[str, Any]], Arguments]
"""Runs before a filter: raises if its result would be too big, else returns the arguments to call it with."""


def _guarded(original: Callable[..., Any], check: Check) -> Callable[..., Any]:
    """`original` with `check` run on its value first; keeps jinja2's pass-context marks, so it is called the same."""
    skip = 1 if hasattr(original, "jinja_pass_arg") else 0

    def guarded(*args: Any, **kwargs: Any) -> Any:
        value, rest, kwargs = check(args[skip], args[skip + 1 :], kwargs)
        return original(*args[:skip], value, *rest, **kwargs)

    guarded.__dict__.update(getattr(original, "__dict__", {}))
    guarded.__name__ = getattr(original, "__name__", "filter")
    return guarded


_STRINGIFYING_FILTERS = frozenset(
    {"string", "e", "escape", "forceescape", "safe", "pprint", "trim", "upper", "lower", "capitalize", "title"}
    | {"striptags", "wordcount", "urlencode", "urlize", "truncate", "xmlattr"}
)
"""Filters that print their value with `str()`: they get `bounds.inert` of it, after a check of its printed size."""


class _SizedFormatter(SandboxedFormatter):
    """`str.format` in the sandbox, refusing a field width or a total output over `max_operand_chars`."""

    def __init__(self, env: _LimitedSandbox, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self._limit = env.limits.max_operand_chars
        self._size = 0

    def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
        self._size = len(format_string)
        return super().vformat(format_string, args, kwargs)

    def format_field(self, value: Any, format_spec: str) -> Any:
        value = bounds.inert(value)
        self._size += max(bounds.format_width(format_spec, self._limit), bounds.printed_size(value, self._limit))
        bounds.check(self._size, self._limit, "str.format's output")
        return super().format_field(value, format_spec)


class _SizedEscapeFormatter(_SizedFormatter, SandboxedEscapeFormatter):
    """The same for a `Markup` string's format, which escapes its fields."""


class _CodeGenerator(FastCodeGenerator):
    """`FastCodeGenerator` (jinja2's code, written with less work), with `~` handed to the sandbox's `concat_values`
    before jinja2 joins the parts."""

    @optimizeconst
    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"{join}(environment.concat_values((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write(")))")


class _LimitedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox with the size, depth and printing hooks listed in the module docstring."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _CodeGenerator

    @property
    def lexer(self) -> Lexer:
        """jinja2's tokens from `FastLexer` (`chatcaps.engines.lexer`): the same generated code, compiled sooner."""
        return fast_lexer(self)

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        """jinja2's tree from `FastParser` (`chatcaps.engines.parser`), for `parse` and `compile`: the same generated
        code, parsed in half the time (a syntax error is jinja2's own, raised as `parse` raises it)."""
        return FastParser(self, source, name, filename).parse()

    def __init__(self, limits: Limits) -> None:
        super().__init__(**TRANSFORMERS_SYNTAX)
        self.limits = limits
        self.filters["tojson"] = self._tojson
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = strftime_now
        self.globals["dict"] = _TemplateDict()
        self.globals["namespace"] = _TemplateNamespace
        self.globals["range"] = self._range
        self.finalize = self._printable
        self._guard_filters()

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        """A template's globals as one plain dict. jinja2's ChainMap over the environment's globals (so that later
        changes to them show, and there are none here) is read key by key in Python by every render's context."""
        return {**self.globals, **(d or {})}

    # The two lookups below are the commonest operations in a chat template: `message.role` and
    # `message['content']` on plain dicts, `messages[0]` on lists, `content.strip` on strings, `message.get`,
    # `ns.found`, `loop.last`. They answer exactly as jinja2's sandbox does, minus its general checks: a plain dict
    # has no attribute of that name (so jinja2 raises and catches an AttributeError before taking the item); a list
    # index or slice is taken as is; a public str method but format and format_map, a non-mutating dict method, a
    # public namespace or loop attribute pass every sandbox check (`is_safe_attribute`, `modifies_known_mutable`), and
    # only a method can need `wrap_str_format`. Any other object takes jinja2's own path.

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
            if type(value) in _DATA:  # `loop.index0`, `ns.found`: no method to wrap
                return value
            return self.wrap_str_format(value) or value
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if type(obj) is dict:
            try:
                return obj[argument]
            except (KeyError, TypeError):
                # jinja2 falls back to an attribute of that name: a method, for the names dict has.
                if isinstance(argument, str) and argument in _DICT_ATTRIBUTES:
                    return super().getitem(obj, argument)
                return self.undefined(obj=obj, name=argument)
        if type(obj) is list and type(argument) in _INDEXES:  # `messages[0]`, `messages[1:]`
            try:
                return obj[argument]
            except (TypeError, LookupError):  # as jinja2's, whose attribute fallback is for str arguments only
                return self.undefined(obj=obj, name=argument)
        return super().getitem(obj, argument)

    # Sizes. Each check runs before the value is built, on what Python would build: see chatcaps.engines.bounds.

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        limit = self.limits.max_operand_chars
        left_kind, right_kind = type(left), type(right)
        if operator == "+":
            if left_kind is str and right_kind is str:  # the commonest cases by far: text + text, loop.index0 + 1
                bounds.check(len(left) + len(right), limit, "the sum")
                return left + right
            if left_kind is int and right_kind is int:
                return left + right
            if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
                bounds.check(len(left) + len(right), limit, "the sum")
        elif operator == "%":
            if left_kind is int and right_kind is int:
                return left % right
            if isinstance(left, str | bytes):
                right = bounds.inert(right)
                bounds.check(bounds.printf_size(left, right, limit), limit, "the %-formatted string")
        elif operator == "*":
            self._check_repeat(left, right)
            self._check_repeat(right, left)
            if isinstance(left, int) and isinstance(right, int):
                self._check_bits(left.bit_length() + right.bit_length(), "*")
        else:
            self._check_bits(_power_bits(left, right), "**")
        return self.binop_table[operator](left, right)

    def _check_bits(self, bits: int, operator: str) -> None:
        if bits > self.limits.max_int_bits:
            raise RenderLimitError(
                f"the integer {operator} would take {bits} bits, over max_int_bits={self.limits.max_int_bits}",
                limit="max_int_bits",
            )

    def _tojson(
        self, x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        """transformers' `tojson`, refused past `max_operand_chars` (`bounds.bounded_json`)."""
        limit = self.limits.max_operand_chars
        return bounds.bounded_json(x, limit, ensure_ascii, indent, separators, sort_keys)

    def _range(self, *args: int) -> range:
        """`range`, refusing more than `max_range` items (jinja2's sandbox raises OverflowError at 100,000)."""
        items = range(*args)
        try:
            size = len(items)
        except OverflowError:  # longer than sys.maxsize
            size = sys.maxsize
        if size > self.limits.max_range:
            raise RenderLimitError(f"range of {size} items, over max_range={self.limits.max_range}", limit="max_range")
        return items

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

    def concat_values(self, parts: tuple[Any, ...]) -> tuple[Any, ...]:
        """`a ~ b ~ c`: each part as it may print, their total length checked before jinja2 joins them."""
        limit = self.limits.max_operand_chars
        if _STR_ONLY.issuperset(map(type, parts)):
            bounds.check(sum(map(len, parts)), limit, "the ~ concatenation")
            return parts
        printable = tuple(map(self._printable, parts))
        size = 0
        for part in printable:  # a loop, not a generator: that would make `limit` a cell, at a cost to every call
            size += bounds.printed_size(part, limit)
        bounds.check(size, limit, "the ~ concatenation")
        return printable

    def concat(self, parts: Iterable[str]) -> str:
        """Joins the output of a captured block (`{% set x %}`, a macro's body) once its length is checked."""
        chunks = parts if type(parts) is list else list(parts)
        bounds.check(sum(map(len, chunks)), self.limits.max_operand_chars, "the captured block")
        return "".join(chunks)

    def _printable(self, value: Any) -> Any:
        """What `{{ value }}` prints: data as itself, its printed size checked; other objects as `<TypeName>`."""
        if type(value) is str:
            return value
        value = bounds.inert(value)
        limit = self.limits.max_operand_chars
        bounds.check(bounds.printed_size(value, limit), limit, "the printed value")
        return value

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """jinja2's own `str.format` wrapper, with the formatter that checks widths and the output's size."""
        if not isinstance(value, types.MethodType | types.BuiltinMethodType) or (
            value.__name__ not in ("format", "format_map")
        ):
            return None
        owner: Any = value.__self__
        if not isinstance(owner, str):
            return None
        formatter = _SizedEscapeFormatter(self, escape=owner.escape) if isinstance(owner, Markup) else None
        vformat = (formatter or _SizedFormatter(self)).vformat
        is_format_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs:
                    raise TypeError("format_map() takes no keyword arguments")
                if len(args) != 1:
                    raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
                kwargs = args[0]
                args = ()
            return type(owner)(vformat(owner, args, kwargs))

        return functools.update_wrapper(wrapper, value)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if type(__obj) is types.BuiltinMethodType and type(__obj.__self__) in _PLAIN_OWNERS:
            # `text.strip()`, `message.get('x')`: the commonest calls, straight to `_call_as_jinja2`.
            if type(__obj.__self__) is str and __obj.__name__ in _GROWING_STR_METHODS:
                args = __self._check_string_method(__obj.__self__, __obj.__name__, args, kwargs)
            return _call_as_jinja2(__self, __obj, args, kwargs)
        if not isinstance(__obj, Macro):
            owner = getattr(__obj, "__self__", None)
            if isinstance(owner, str | bytes):
                args = __self._check_string_method(owner, __obj.__name__, args, kwargs)
            elif type(owner) is int and getattr(__obj, "__name__", "") == "to_bytes":
                bounds.check(_argument(args, kwargs, 0, "length", 1), __self.limits.max_operand_chars, "to_bytes")
            elif __obj is strftime_now and args and isinstance(args[0], str):
                bounds.check(strftime_size(args[0]), __self.limits.max_operand_chars, "strftime_now's result")
            return super().call(__context, __obj, *args, **kwargs)
        depth = _macro_depth.get()
        if depth >= __self.limits.max_recursion:
            raise RenderLimitError(
                f"macro calls nested deeper than max_recursion={__self.limits.max_recursion}", limit="max_recursion"
            )
        token = _macro_depth.set(depth + 1)
        try:
            if type(__obj) is Macro:  # `Macro.__call__` is marked pass_eval_context
                return _call_as_jinja2(__self, __obj, (__context.eval_ctx, *args), kwargs)
            return super().call(__context, __obj, *args, **kwargs)
        finally:
            _macro_depth.reset(token)

    def _check_string_method(
        self, text: str | bytes, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, ...]:
        """Refuse a str (or bytes) method call whose result would be too long; `join` gets its items as a list."""
        limit = self.limits.max_operand_chars
        size = 0
        if method in ("center", "ljust", "rjust", "zfill"):
            width = _argument(args, kwargs, 0, "width", 0)
            size = width if isinstance(width, int) else 0
        elif method == "expandtabs":
            tabsize = _argument(args, kwargs, 0, "tabsize", 8)
            tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
            size = len(text) + tabs * (tabsize if isinstance(tabsize, int) else 0)
        elif method == "replace" and len(args) >= 2:
            size = bounds.replace_size(text, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count", -1))
        elif method == "translate" and args and isinstance(args[0], Mapping):
            longest = max((len(item) for item in args[0].values() if isinstance(item, str)), default=1)
            size = len(text) * max(longest, 1)
        elif method == "join" and args:
            items = list(args[0])
            size = len(text) * len(items) + sum(len(item) for item in items if isinstance(item, str | bytes))
            args = (items, *args[1:])
        bounds.check(size, limit, f"{type(text).__name__}.{method}'s result")
        return args

    def _guard_filters(self) -> None:
        """Wrap the filters that print their value or can build a string far larger than their input."""
        limit = self.limits.max_operand_chars
        printable = self._printable

        def value_only(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
            return printable(value), args, kwargs

        def center(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
            width = _argument(args, kwargs, 0, "width", 80)
            bounds.check(width if isinstance(width, int) else 0, limit, "center's result")
            return printable(value), args, kwargs

        def indent(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
            value = printable(value)
            width = _argument(args, kwargs, 0, "width", 4)
            width = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
            bounds.check(width, limit, "indent's width")
            text = str(value)
            bounds.check(len(text) + (text.count("\n") + 1) * width, limit, "indent's result")
            return value, args, kwargs

        def format_(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
            value = printable(value)
            args, kwargs = bounds.inert(args), bounds.inert(kwargs)
            bounds.check(bounds.printf_size(str(value), kwargs or args, limit), limit, "format's result")
            return value, args, kwargs

        def replace(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
            value = printable(value)
            old, new = _argument(args, kwargs, 0, "old", ""), _argument(args, kwargs, 1, "new", "")
            count = _argument(args, kwargs, 2, "count", None)
            size = bounds.replace_size(str(value), str(old), str(new), -1 if count is None else count)
            bounds.check(size, limit, "replace's result")
            return value, args, kwargs

        def join(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
            items = [bounds.inert(item) for item in value]
            separator = len(str(_argument(args, kwargs, 0, "d", "")))
            size = separator * len(items) + sum(bounds.printed_size(item, limit) for item in items)
            bounds.check(size, limit, "join's result")
            return items, args, kwargs

        def wordwrap(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
            value = printable(value)
            text = str(value)
            width = _argument(args, kwargs, 0, "width", 79)
            wrap = _argument(args, kwargs, 2, "wrapstring", None)
            lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count(" ") + text.count("\n")
            bounds.check(len(text) + (lines + 1) * len(str(wrap or "\n")), limit, "wordwrap's result")
            return value, args, kwargs

        def fill(index: int, name: str) -> Check:
            def check(value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
                count = _argument(args, kwargs, index, name, 0)
                bounds.check(count if isinstance(count, int) else 0, limit, f"the {name}")
                return value, args, kwargs

            return check

        checks: dict[str, Check] = dict.fromkeys(_STRINGIFYING_FILTERS, value_only)
        checks.update(
            center=center,
            indent=indent,
            format=format_,
            replace=replace,
            join=join,
            wordwrap=wordwrap,
            batch=fill(0, "linecount"),
            slice=fill(0, "slices"),
        )
        for name, check in checks.items():
            self.filters[name] = _guarded(self.filters[name], check)
        self.filters["sum"] = _linear_sum


class _MutableSandbox(_LimitedSandbox):
    """`_LimitedSandbox` less its immutability: a template may change the lists and dicts it builds or is given
    (`ids.append(...)`), as in jinja2's plain `SandboxedEnvironment`; every other check and limit stands. For
    `MutableRenderer` only."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)


@jinja2.pass_environment
def _linear_sum(environment: jinja2.Environment, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """jinja2's `sum`, with lists and tuples chained in linear time (`bounds.linear_sum`)."""
    if attribute is not None:
        iterable = map(make_attrgetter(environment, attribute), iterable)
    return bounds.linear_sum(iterable, start, environment.limits.max_operand_chars)  # type: ignore[attr-defined]


def syntax_error(error: jinja2.TemplateSyntaxError, source: str, name: str) -> TemplateSyntaxError:
    """jinja2's syntax error at the position both engines report (the one rule, used by `find_candidates` too).

    jinja2 gives only the line; the column and span are minijinja's (the offending token's) when minijinja fails on
    the same line, else the column is the line's first non-blank character and the span unknown. Line and column are
    1-based.
    """
    line = error.lineno
    place = _minijinja_place(source, name)
    if place is None or place[0] != line:
        place = line, line_text(source, line, cr_ends_line=True), None
    _, text, span = place
    blank = 0 if text is None else len(text) - len(text.lstrip())
    column = (blank if span is None else span[0]) + 1
    return TemplateSyntaxError(
        error.message or str(error), template_name=name, line=line, column=column, source_line=text, span=span
    )


def too_deep(source: str, name: str) -> TemplateSyntaxError:
    """A template nested past what Python's recursion limit lets jinja2 parse or compile (a few hundred brackets or
    blocks inside one another): a syntax error, as minijinja reports its own nesting limit, at minijinja's place
    when it refuses the same source, else at the start (no source line: the start is not where the fault is)."""
    message = "the template nests too deeply to parse (past Python's recursion limit)"
    place = _minijinja_place(source, name)
    if place is None:
        return TemplateSyntaxError(message, template_name=name, line=1, column=1)
    line, text, span = place
    column = 1 if span is None else span[0] + 1
    return TemplateSyntaxError(message, template_name=name, line=line, column=column, source_line=text, span=span)


def _minijinja_place(source: str, name: str) -> SourceSpot | None:
    """(line, its text, span) where minijinja refuses `source` as a syntax error; None where it compiles it."""
    try:
        MinijinjaRenderer(source, name=name)
    except TemplateSyntaxError as located:
        cause = located.__cause__  # minijinja's own error, whose byte range gives the span
        if isinstance(cause, minijinja.TemplateError) and cause.range is not None:
            return byte_range_place(source, cause.range)
        return located.line, located.source_line, located.span
    return None


def _over_memory(error: OverMemory, renderer: Renderer) -> RenderLimitError:
    return RenderLimitError(
        f"the process grew by more than max_memory_bytes={renderer.limits.max_memory_bytes} during the render",
        limit="max_memory_bytes",
        template_name=renderer.name,
    )


def _expired(error: Expired, renderer: Renderer) -> RenderLimitError:
    return RenderLimitError(
        f"render ran past time_s={renderer.limits.time_s}", limit="time_s", template_name=renderer.name
    )


def _security(error: jinja2.exceptions.SecurityError, renderer: Renderer) -> TemplateSecurityError:
    return TemplateSecurityError(str(error), template_name=renderer.name)


def _template_error(error: jinja2.TemplateError, renderer: Renderer) -> TemplateRenderError:
    """`raise_exception`'s message, or jinja2's own (an undefined called, a bad filter argument)."""
    return TemplateRenderError(error.message or str(error), template_name=renderer.name)


_RENDER_ERRORS = ErrorMap(
    (OverMemory, _over_memory),  # before Expired, its base
    (Expired, _expired),
    *SHARED_RULES,
    (jinja2.exceptions.SecurityError, _security),  # before TemplateError, its base
    (jinja2.TemplateError, _template_error),
    (Exception, python_error),
)
"""jinja2's exceptions (and the watchdog's) as chatcaps errors; see `chatcaps.engines.error_map`."""


class Jinja2Renderer:
    """A template compiled in transformers' environment; see the module docstring."""

    engine: EngineName = "jinja2"

    _sandbox: type[_LimitedSandbox] = _LimitedSandbox

    def __init__(self, source: str, *, name: str = "<template>", limits: Limits = DEFAULT_LIMITS) -> None:
        self.source = source
        self.name = name
        self.limits = limits
        self._env = env = self._sandbox(limits)
        try:
            # `from_string`, keeping the parsed tree: `FastCodeGenerator` compiles it without changing it.
            tree = env.parse(source)
            self._template = env.template_class.from_code(env, env.compile(tree), env.make_globals(None), None)
        except jinja2.TemplateSyntaxError as error:
            raise syntax_error(error, source, name) from error
        except RecursionError:
            raise too_deep(source, name) from None
        self._tree: jinja2.nodes.Template | None = tree

    def undeclared_variables(self) -> frozenset[str]:
        return frozenset(jinja2.meta.find_undeclared_variables(self._env.parse(self.source)))

    def source_tree(self) -> jinja2.nodes.Template | None:
        tree, self._tree = self._tree, None  # held until the candidate reader takes it, not for the renderer's life
        return tree

    def render(self, variables: Mapping[str, Any]) -> str:
        try:
            return run_with_deadline(
                lambda: self._collect(self._template.generate(variables)),
                self.limits.time_s,
                self.limits.max_memory_bytes,
            )
        except BaseException as error:
            _RENDER_ERRORS.reraise(error, self)

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


class MutableRenderer(Jinja2Renderer):
    """A template compiled in transformers' environment less its immutability (`_MutableSandbox`), for the probes
    alone: they read what a template writes where transformers' sandbox refuses the render only because the
    template changes data it builds (Kimi-K2 collects each call's id with `ids.append(...)`, so no turn with a call
    renders there). A user's render never comes here: it keeps transformers' refusal. Each render gets its own copy
    of the variables, so a template that changes them changes none of the caller's."""

    _sandbox = _MutableSandbox

    def render(self, variables: Mapping[str, Any]) -> str:
        return super().render(orjson.loads(orjson.dumps(variables)))
