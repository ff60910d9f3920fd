"""The minijinja engine: the same globals and filters as the jinja2 engine, on minijinja's Rust core (faster; see docs).

Differences from jinja2 that remain are measured by the parity test and listed in docs/engines.md.
Sandboxing: minijinja refuses underscore attributes, but calls any other public method of the Python objects it is
given, `list.append` and `dict.update` included, so every list and dict reaches it as a read-only copy
(`read_only`): a template cannot change the caller's data or grow a list without bound.
Its work per render is bounded by `fuel` (`fuel_budget`: from `Limits.time_s` and `Limits.max_memory_bytes`), its
recursion by its own fixed limit, and its output is checked against `Limits.max_output_chars` once rendered
(minijinja builds the output in one piece).
By default (`Limits(isolate=True)`) each render runs in a worker process capped at `max_memory_bytes` and killed
past `time_s` (`isolation.py`). In-process (`isolate=False`, for templates you have vetted), fuel is the only bound,
and some of minijinja's Rust work escapes it: joining, printing or concatenating lazily repeated lists, `str.format`
widths, copying an input string at every lookup. Such a template can run for minutes or abort the process when an
allocation fails, and nothing can interrupt it: the binding holds the GIL throughout (see docs/security.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import minijinja

from chatcaps.engines import bounds, isolation
from chatcaps.engines.base import DEFAULT_LIMITS, EngineName, Limits, Renderer
from chatcaps.engines.builtins import strftime_now, strftime_size
from chatcaps.engines.error_map import SHARED_RULES, ErrorMap, minijinja_syntax_error, python_error
from chatcaps.errors import RenderLimitError, TemplateRenderError

_GENERATION_OPEN = re.compile(r"(\{%[-+]?\s*)generation(\s*[-+]?%\})")
_GENERATION_CLOSE = re.compile(r"(\{%[-+]?\s*)endgeneration(\s*[-+]?%\})")

_OPERAND_ERRORS = ("too large",)
FUEL_BYTES = 64
"""Bytes of data minijinja charges one fuel for (its `UNITS_PER_FUEL`, vm/fuel.rs): every byte a render builds or
writes is charged, so a budget of `n` fuel bounds the data it builds to about `n * 64` bytes."""


def fuel_budget(limits: Limits) -> tuple[int, str]:
    """The fuel of one render and the `Limits` field that sets it: `time_s x minijinja_fuel_per_s`, or fewer where
    `max_memory_bytes / FUEL_BYTES` is smaller (a render that builds data spends its fuel on bytes, and the budget then
    bounds the memory it takes; work minijinja does not meter is bounded only isolated)."""
    by_time = max(1, int(limits.time_s * limits.minijinja_fuel_per_s))
    if limits.max_memory_bytes is not None and limits.max_memory_bytes // FUEL_BYTES < by_time:
        return max(1, limits.max_memory_bytes // FUEL_BYTES), "max_memory_bytes"
    return by_time, "time_s"


class _Raised(Exception):
    """What `raise_exception` throws inside minijinja; minijinja passes Python exceptions through unchanged."""


def _raise_exception(message: str) -> None:
    raise _Raised(message)


_LIST_CHANGERS = frozenset({"append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse"})
_DICT_CHANGERS = frozenset({"update", "setdefault", "pop", "popitem", "clear"})
_LEAVES = frozenset({str, int, float, bool, type(None)})


class _Hidden:
    """A method a template must not see: reading it raises AttributeError, so minijinja finds no such method."""

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        raise AttributeError("template data is read-only")


class _BoundMethod:
    """A data method bound to its object, printed as `<method>` rather than with its memory address.

    What it hands back is read-only too: `get` returns its default and `fromkeys` builds a dict from values the
    template passed, which minijinja hands Python as plain lists and dicts (`extend` on such a list, doubling it in a
    loop, would grow it without bound)."""

    __slots__ = ("_function", "_owner")

    def __init__(self, function: Any, owner: object) -> None:
        self._function = function
        self._owner = owner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self._function(self._owner, *args, **kwargs)
        return result if type(result) in _READ_ONLY else read_only(result)  # `get` of a field is read-only already

    def __repr__(self) -> str:
        return "<method>"


class _Method:
    """A data method as a template sees it; `copy` gives a read-only copy."""

    def __init__(self, function: Any) -> None:
        self._function = function

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return self if obj is None else _BoundMethod(self._function, obj)


def _read_only_type(base: type[Any], changers: frozenset[str]) -> type[Any]:
    """A subclass of list or dict whose changing methods are hidden and whose other public methods print inertly.

    Its `_source` (out of a template's reach, as minijinja refuses underscore attributes) is the list or dict it
    copies: `tojson` writes that, a plain container the JSON encoder reads without calling the wrapped methods."""
    namespace: dict[str, Any] = {"__slots__": ("_source",), "__doc__": f"A read-only {base.__name__} for templates."}
    for name in dir(base):
        if not name.startswith("_"):
            namespace[name] = _Hidden() if name in changers else _Method(getattr(base, name))
    namespace["copy"] = _Method(read_only)
    return type(f"ReadOnly{base.__name__.title()}", (base,), namespace)


def read_only(value: Any) -> Any:
    """`value` with every list and dict in it a read-only copy (tuples rebuilt around them); leaves are shared.

    minijinja calls any public method of the Python objects it is given, `list.append` and `dict.update` included:
    with these copies a template can neither change the caller's data nor grow a list without bound."""
    kind = type(value)
    # Plain dicts and lists first, by exact type: the input is plain data (`plain_data`), and the copies' own item
    # assignment is the type's (only named methods are hidden).
    if kind is dict:
        copy = _ReadOnlyDict(value)
        copy._source = value
        for key, item in value.items():
            if type(item) not in _LEAVES:
                copy[key] = read_only(item)
        return copy
    if kind is list:
        copy = _ReadOnlyList(value)
        copy._source = value
        for index, item in enumerate(value):
            if type(item) not in _LEAVES:
                copy[index] = read_only(item)
        return copy
    if kind in _LEAVES:
        return value
    if isinstance(value, dict):  # a subclass, a read-only copy among them (`copy()`): its own methods are not used
        copy = _ReadOnlyDict(value)
        copy._source = value
        for key, item in dict.items(value):
            if type(item) not in _LEAVES:
                dict.__setitem__(copy, key, read_only(item))
        return copy
    if isinstance(value, list):
        copy = _ReadOnlyList(value)
        copy._source = value
        for index, item in enumerate(list.__iter__(value)):
            if type(item) not in _LEAVES:
                list.__setitem__(copy, index, read_only(item))
        return copy
    if isinstance(value, tuple):
        return tuple(read_only(item) for item in value)
    return value


_ReadOnlyList = _read_only_type(list, _LIST_CHANGERS)
_ReadOnlyDict = _read_only_type(dict, _DICT_CHANGERS)
_READ_ONLY = (_ReadOnlyList, _ReadOnlyDict)


def _item_path(value: Any, path: Any) -> Any:
    """The item at `path` (`a.b.0`: keys, digits as indexes), as jinja2's filters take an `attribute`; None if any
    step is missing (the data here has no attributes worth reading, only methods)."""
    for part in [path] if isinstance(path, int) else str(path).split("."):
        try:
            value = value[int(part) if isinstance(part, str) and part.isdigit() else part]
        except (LookupError, TypeError):
            return None
    return value


def _indent(text: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    """jinja2's `indent`, which keeps a trailing newline that minijinja's drops."""
    indention = width if isinstance(width, str) else " " * width
    text += "\n"  # jinja2's own quirk: makes splitlines() keep a final empty line
    if blank:
        result = ("\n" + indention).join(text.splitlines())
    else:
        lines = text.splitlines()
        result = lines.pop(0)
        if lines:
            result += "\n" + "\n".join(indention + line if line else line for line in lines)
    return indention + result if first else result


def _is_iterable(value: Any) -> bool:
    """jinja2's `iterable` test: none is not iterable (minijinja says it is)."""
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _is_sequence(value: Any) -> bool:
    """jinja2's `sequence` test: anything with a length and item access, strings and dicts included."""
    try:
        len(value)
        value.__getitem__  # noqa: B018 - the attribute's presence is the test
    except Exception:
        return False
    return True


def _without_generation_tags(source: str) -> str:
    """`{% generation %}` as a block that always renders, keeping its whitespace-control marks (and so its spacing)
    and its length (so every position after it, as errors report them, is the template's own)."""
    source = _GENERATION_OPEN.sub(r"\1if true   \2", source)
    return _GENERATION_CLOSE.sub(r"\1endif        \2", source)


class MinijinjaRenderer:
    """A template compiled by minijinja; see the module docstring."""

    engine: EngineName = "minijinja"

    def __init__(self, source: str, *, name: str = "<template>", limits: Limits = DEFAULT_LIMITS) -> None:
        self.source = source
        self.name = name
        self.limits = limits
        if limits.isolate:
            isolation.require()
        self._token = isolation.new_token()
        self._env = minijinja.Environment(
            trim_blocks=True,
            lstrip_blocks=True,
            pycompat=True,
            fuel=fuel_budget(limits)[0],
            globals={"raise_exception": _raise_exception, "strftime_now": self._strftime_now},
            filters={"tojson": self._tojson, "indent": self._indent, "sum": self._sum},
            tests={"iterable": _is_iterable, "sequence": _is_sequence},
        )
        prepared = _without_generation_tags(source)
        try:
            self._env.add_template(name, prepared)
        except minijinja.TemplateError as error:
            raise minijinja_syntax_error(error, prepared, name) from error

    def undeclared_variables(self) -> frozenset[str]:
        return frozenset(self._env.undeclared_variables_in_template(self.name))

    def source_tree(self) -> None:
        """minijinja parses in Rust: no jinja2 tree."""
        return None

    def _tojson(
        self, x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        """transformers' `tojson`, refused past `max_operand_chars` (`bounds.bounded_json`). A read-only copy is
        part of the render's own input: its plain container is written instead (`plain` in `bounds.bounded_json`),
        which the encoder reads without calling the copy's wrapped methods."""
        limit = self.limits.max_operand_chars
        if type(x) in _READ_ONLY:
            return bounds.bounded_json(x._source, limit, ensure_ascii, indent, separators, sort_keys, plain=True)
        return bounds.bounded_json(x, limit, ensure_ascii, indent, separators, sort_keys)

    def _indent(self, text: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
        """`indent`, refusing a width or an output over `max_operand_chars` before building it."""
        limit = self.limits.max_operand_chars
        size = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        bounds.check(size, limit, "indent's width")
        bounds.check(len(text) + (text.count("\n") + 1) * size, limit, "indent's result")
        return _indent(text, width, first, blank)

    def _strftime_now(self, format: str) -> str:
        """`strftime_now`, refusing a format whose output could pass `max_operand_chars` (one slow C call)."""
        limit = self.limits.max_operand_chars
        bounds.check(strftime_size(format) if isinstance(format, str) else 0, limit, "strftime_now's result")
        return strftime_now(format)

    def _sum(self, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
        """jinja2's `sum` (minijinja's adds lists in quadratic time, without a fuel check): numbers with Python's
        `sum`, lists and tuples chained in linear time; a list it builds reaches the template read-only, as data
        methods' results do (`_BoundMethod`)."""
        if attribute is not None:
            iterable = [_item_path(item, attribute) for item in iterable]
        return read_only(bounds.linear_sum(iterable, start, self.limits.max_operand_chars))

    def render(self, variables: Mapping[str, Any]) -> str:
        if self.limits.isolate:
            return isolation.render(self._token, self.source, self.name, self.limits, variables)
        try:
            copy = read_only(variables if type(variables) is dict else dict(variables))  # a new dict either way
            output: str = self._env.render_template(self.name, **copy)
        except BaseException as error:
            _RENDER_ERRORS.reraise(error, self)
        if len(output) > self.limits.max_output_chars:
            raise RenderLimitError(
                f"output exceeded max_output_chars={self.limits.max_output_chars}",
                limit="max_output_chars",
                template_name=self.name,
            )
        return output


def _detail(error: minijinja.TemplateError) -> str:
    return error.detail or error.message


def _says(*texts: str, kind: str | None = None) -> Callable[[BaseException], bool]:
    """Matches a minijinja error of `kind` (any when None) whose detail holds one of `texts` (any when none given)."""

    def match(error: BaseException) -> bool:
        return (
            isinstance(error, minijinja.TemplateError)
            and (kind is None or error.kind == kind)
            and (not texts or any(text in _detail(error) for text in texts))
        )

    return match


def _is_panic(error: BaseException) -> bool:
    """A panic in minijinja's Rust code: pyo3's PanicException, a BaseException (no module to import it from)."""
    return type(error).__name__ == "PanicException"


def _raised(error: _Raised, renderer: Renderer) -> TemplateRenderError:
    return TemplateRenderError(str(error), template_name=renderer.name)


def _out_of_fuel(error: minijinja.TemplateError, renderer: Renderer) -> RenderLimitError:
    fuel, limit = fuel_budget(renderer.limits)
    return RenderLimitError(
        f"render ran out of fuel ({fuel:,} fuel, set by {limit}={getattr(renderer.limits, limit)})",
        limit=limit,
        template_name=renderer.name,
    )


def _recursion(error: minijinja.TemplateError, renderer: Renderer) -> RenderLimitError:
    return RenderLimitError(f"minijinja: {_detail(error)}", limit="max_recursion", template_name=renderer.name)


def _range(error: minijinja.TemplateError, renderer: Renderer) -> RenderLimitError:
    return RenderLimitError(
        f"minijinja: {_detail(error)} (its limit is fixed at 100,000)", limit="max_range", template_name=renderer.name
    )


def _operand(error: minijinja.TemplateError, renderer: Renderer) -> RenderLimitError:
    return RenderLimitError(f"minijinja: {_detail(error)}", limit="max_operand_chars", template_name=renderer.name)


def _template_error(error: minijinja.TemplateError, renderer: Renderer) -> TemplateRenderError:
    return TemplateRenderError(f"{error.kind}: {_detail(error)}", template_name=renderer.name, line=error.line)


def _panic(error: BaseException, renderer: Renderer) -> TemplateRenderError:
    return TemplateRenderError(f"minijinja panicked: {error}", template_name=renderer.name)


_RENDER_ERRORS = ErrorMap(
    (_Raised, _raised),
    (_says(kind="OutOfFuel"), _out_of_fuel),
    (_says("recursion limit"), _recursion),
    (_says("range has too many elements"), _range),
    (_says(*_OPERAND_ERRORS, kind="InvalidOperation"), _operand),
    (minijinja.TemplateError, _template_error),
    *SHARED_RULES,
    (Exception, python_error),
    (_is_panic, _panic),  # seen before minijinja 3.1: `messages[::-1]` of an empty list
)
"""minijinja's exceptions as chatcaps errors; see `chatcaps.engines.error_map`."""
