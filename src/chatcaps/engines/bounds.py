"""How big a value will be before a template builds it, and what a template may print.

One C call — `str.join`, `str.replace`, `'%999999999d' % 1`, `repr` of a list holding one long string a million
times, `json.dumps(x, indent=10**9)` — can build gigabytes before any watchdog gets to run, so the sandbox hooks
estimate the size first (an upper bound, exact for plain strings) and refuse with `RenderLimitError`.

`inert` is what a template may print: data prints as itself; any other object (a function, a class, a bound method,
a generator) would print its Python repr, with its module path and memory address, and prints `<TypeName>` instead.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, ItemsView, Iterable, KeysView, Mapping, Sequence, ValuesView
from functools import lru_cache
from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from jinja2.runtime import Undefined
from jinja2.utils import Namespace

from chatcaps.errors import RenderLimitError

_NUMBER_CHARS = 330
"""The most characters one number takes in `%f` / `{:f}` formatting (a float near 1e308), before width."""
_LEAVES = (str, bytes, int, float, type(None), Undefined, range)
_CONTAINERS = (list, tuple, dict, set, frozenset, KeysView, ValuesView, ItemsView, Namespace)
_STREAMED_INDENT = 64
"""The widest `tojson` indent streamed: a chunk is then at most 64 x the depth (which Python's recursion limit caps)."""
ESCAPED = 6
"""The most characters JSON writes for one of a string's: `\\u001f`."""
ESCAPED_ASCII = 12
"""The same with `ensure_ascii`: a character outside the BMP, as a surrogate pair `\\ud83d\\ude00`."""
_JSON_LEAVES = frozenset({float, bool, type(None)})
QUICK_JSON_CHARS = 1 << 16
"""How far `bounded_json`'s quick walk (`plain_json_bound`) counts a template-built value's compact JSON before the
memoised estimate (`json_size`) takes over."""
_UNBOUNDED = 1 << 62
"""A bound past any limit: what `plain_json_bound` does not count."""
_PRINTF = re.compile(r"%(?:\(([^)]*)\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.DOTALL)
_DIGITS = re.compile(r"\d+")


def too_big(size: int, limit: int, what: str) -> RenderLimitError:
    return RenderLimitError(
        f"{what} would be {size} characters, over max_operand_chars={limit}", limit="max_operand_chars"
    )


def check(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise too_big(size, limit, what)


def _members(value: Any) -> Iterable[Any]:
    """What a container prints: items, or keys and values in turn."""
    if isinstance(value, Mapping | ItemsView):
        return (part for pair in (value.items() if isinstance(value, Mapping) else value) for part in pair)
    if isinstance(value, Namespace):
        return _members(value._Namespace__attrs)
    return value  # type: ignore[no-any-return]


def printed_size(value: Any, stop: int) -> int:
    """An upper estimate of `len(str(value))`, exact for a str; the walk stops once the size passes `stop`.

    A container shared many times (`[[long] * 1000] * 1000`) is walked once and counted every time it prints."""
    if type(value) is str:
        return len(value)
    return _size(value, stop, {})


def _size(value: Any, stop: int, memo: dict[int, int]) -> int:
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value) + 3  # quotes, and b'' for bytes, when printed inside a container
    if kind is int:
        bits: int = value.bit_length()
        return bits * 77 // 256 + 2  # decimal digits, and a sign
    if kind is bool or kind is float or value is None:
        return 24
    if not isinstance(value, _CONTAINERS):
        return len(value) + 3 if isinstance(value, str | bytes) else 24  # `<TypeName>` once inert, or short
    key = id(value)
    known = memo.get(key)
    if known is not None:
        return known
    memo[key] = 8  # a container inside itself prints as [...]
    total = 16
    members: Any
    if isinstance(value, dict):
        total += sum(len(name) + 4 if type(name) is str else _size(name, stop, memo) for name in value)
        members = value.values()
    else:
        members = value if kind is list or kind is tuple else _members(value)
    for member in members:
        total += len(member) + 5 if type(member) is str else _size(member, stop, memo) + 2
        if total > stop:
            break
    memo[key] = total
    return total


def opaque(value: Any) -> bool:
    return not isinstance(value, _LEAVES + _CONTAINERS)


def placeholder(value: Any) -> str:
    return f"<{type(value).__name__}>"


def inert(value: Any) -> Any:
    """`value` if printing it shows only data; else a copy with `<TypeName>` for every object that is not data."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if opaque(value):
        return placeholder(value)
    if isinstance(value, _CONTAINERS) and _holds_opaque(value, set()):
        return _scrubbed(value)
    return value


def _holds_opaque(value: Any, seen: set[int]) -> bool:
    if id(value) in seen:
        return False
    seen.add(id(value))
    for member in _members(value):
        if opaque(member) or (isinstance(member, _CONTAINERS) and _holds_opaque(member, seen)):
            return True
    return False


def _scrubbed(value: Any) -> Any:
    if opaque(value):
        return placeholder(value)
    if isinstance(value, Mapping | Namespace):
        items = value._Namespace__attrs if isinstance(value, Namespace) else value
        return {_scrubbed(key): _scrubbed(item) for key, item in items.items()}
    if isinstance(value, tuple | ItemsView):
        return tuple(_scrubbed(item) for item in value)
    return [_scrubbed(item) for item in _members(value)]


def format_width(spec: str, limit: int) -> int:
    """The largest width or precision in a `str.format` spec (`>30`, `.5f`, `0{}` once filled in)."""
    widest = 0
    for digits in _DIGITS.findall(spec):
        if len(digits) > 12:
            raise too_big(10 ** min(len(digits), 18), limit, f"the format spec {spec[:40]!r}")
        widest = max(widest, int(digits))
    return widest


def printf_size(template: str | bytes, args: Any, limit: int) -> int:
    """An upper bound on the length of `template % args`: every literal character, and for each conversion the
    widest of its width, precision and printed argument."""
    text = template.decode("latin-1") if isinstance(template, bytes) else template
    positional = args if isinstance(args, tuple) else (args,)
    mapping = args if isinstance(args, Mapping) else None
    next_arg = 0
    total = len(text)
    for match in _PRINTF.finditer(text):
        key, width, precision, conversion = match.groups()
        widest = 0
        for part in (width, precision):
            if part == "*":
                star = positional[next_arg] if next_arg < len(positional) else 0
                next_arg += 1
                widest = max(widest, star if isinstance(star, int) else 0)
            elif part:
                widest = max(widest, format_width(part, limit))
        if conversion == "%":
            continue
        if key is not None:
            arg = mapping.get(key) if mapping is not None else None
        else:
            arg = positional[next_arg] if next_arg < len(positional) else None
            next_arg += 1
        if conversion in "rsa":
            size = printed_size(arg, limit)
        elif type(arg) is int and conversion in "diouxXc":
            size = _size(arg, limit, {})
        else:
            size = _NUMBER_CHARS + widest  # a float's digits, then as many decimals as the precision asks
        total += max(widest, size)
        if total > limit:
            break
    return total


def replace_size(text: str | bytes, old: Any, new: Any, count: Any = -1) -> int:
    """The exact length of `text.replace(old, new, count)`, counted without building it."""
    kind = str if isinstance(text, str) else bytes
    if not (isinstance(old, kind) and isinstance(new, kind)):
        return len(text)  # replace raises on mixed types
    found = text.count(old) if old else len(text) + 1  # type: ignore[arg-type]
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    return len(text) + found * (len(new) - len(old))


def json_size(value: Any, indent: Any, separators: Any, limit: int) -> int:
    """An upper bound on `json.dumps(value, indent=..., separators=...)`: the printed size, plus for every member a
    line break, its depth times the indent and the separators."""
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    extra = sum(len(part) for part in separators if isinstance(part, str)) if isinstance(separators, tuple) else 2
    size = printed_size(value, limit)
    if width <= 0 and extra <= 2:
        return size
    members, depth = _shape(value, 0, {})
    return size + members * (width * depth + 1 + extra)


def bounded_json(
    x: Any, limit: int, ensure_ascii: bool, indent: Any, separators: Any, sort_keys: bool, *, plain: bool = False
) -> str:
    """transformers' `tojson` (`json.dumps` with its options, without jinja2's HTML escaping), refused once it would
    pass `limit` characters.

    Compact JSON, and JSON with a wide indent (one chunk holds the indent times the depth), is estimated first
    (`json_size`: a container shared many times is walked once and counted every time it is written). The estimate
    counts a string's characters once, but JSON writes one as up to 6 (`\\u001f`), or 12 with `ensure_ascii` (a
    surrogate pair): where that could pass `limit`, and always with a usual indent, Python's encoder builds the JSON
    chunk by chunk, exactly as `json.dumps` does, each chunk counted as it comes, refused at the limit to the
    character. Else it is written in one call by the C encoder; for `plain` data (the render's own input, which has
    no cycles) one built once rather than per call.

    Compact JSON of plain data is bounded first by `plain_json_bound`, which counts the escapes too and is four times
    cheaper than `json_size`, and then written by that C encoder: the render's own input (`plain`) up to `limit`,
    any other value (one the template built) up to `QUICK_JSON_CHARS`. Such a value has no cycles either (a sandbox
    that refuses `append` and `update` lets a template build none), but it may hold one list many times: walked
    without `json_size`'s memo, it is counted each time, so the quick bound gives up past `QUICK_JSON_CHARS` and the
    memoised walk decides (a list that holds one list twice, 64 deep, costs the walk about 64k characters' worth)."""
    if indent is None and separators is None:
        stop = limit if plain else min(limit, QUICK_JSON_CHARS)
        if plain_json_bound(x, bool(ensure_ascii), stop) <= stop:
            return compact_json(x, bool(ensure_ascii), bool(sort_keys))
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    if indent is None or width > _STREAMED_INDENT:
        size = json_size(x, indent, separators, limit)
        check(size, limit, "tojson's result")
        if size * (ESCAPED_ASCII if ensure_ascii else ESCAPED) <= limit:
            if plain and indent is None and separators is None:
                return compact_json(x, bool(ensure_ascii), bool(sort_keys))
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    chunks = []
    size = 0
    for chunk in encoder.iterencode(x):
        size += len(chunk)
        if size > limit:
            raise too_big(size, limit, "tojson's result")
        chunks.append(chunk)
    return "".join(chunks)


def plain_json_bound(value: Any, ensure_ascii: bool, stop: int) -> int:
    """An upper bound on the length of `json.dumps(value)` (compact) for plain data: dicts with str keys, lists, str,
    int, float, bool, None; past `stop` once it exceeds it, and past any limit for anything else. A string's character
    counts `ESCAPED` (`ESCAPED_ASCII`), a float, bool or None 24, an int its digits and sign; a value held many times
    is counted each time (the walk stops at `stop`). Four times cheaper than `json_size`, which takes any value."""
    return _plain_bound(value, ESCAPED_ASCII if ensure_ascii else ESCAPED, stop)


def _plain_bound(value: Any, width: int, stop: int) -> int:
    total = 2
    if type(value) is dict:
        for key, item in value.items():
            kind = type(item)
            if type(key) is not str:
                return _UNBOUNDED
            if kind is str:
                total += (len(key) + len(item)) * width + 8  # "key": "item",
            elif kind is dict or kind is list:
                total += len(key) * width + 6 + _plain_bound(item, width, stop)
            elif kind is int:
                total += len(key) * width + 8 + item.bit_length() // 3
            elif kind in _JSON_LEAVES:
                total += len(key) * width + 30
            else:
                return _UNBOUNDED
            if total > stop:
                return total
    elif type(value) is list:
        for item in value:
            kind = type(item)
            if kind is str:
                total += len(item) * width + 4
            elif kind is dict or kind is list:
                total += 2 + _plain_bound(item, width, stop)
            elif kind is int:
                total += 4 + item.bit_length() // 3
            elif kind in _JSON_LEAVES:
                total += 26
            else:
                return _UNBOUNDED
            if total > stop:
                return total
    else:
        return _UNBOUNDED
    return total


def compact_json(x: Any, ensure_ascii: bool, sort_keys: bool) -> str:
    """`json.dumps(x, ensure_ascii=..., sort_keys=...)` of plain data (no cycles), unbounded: the caller has bounded
    its length."""
    if c_make_encoder is None:
        return json.dumps(x, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    return "".join(_compact_encoder(ensure_ascii, sort_keys)(x, 0))


@lru_cache(maxsize=4)
def _compact_encoder(ensure_ascii: bool, sort_keys: bool) -> Callable[[Any, int], Sequence[str]]:
    """The C encoder `json.dumps` builds on every call for compact JSON (default separators), built once. Without its
    check for circular references: `bounded_json` uses it for the render's input, plain data, which has none."""
    encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    strings = encode_basestring_ascii if ensure_ascii else encode_basestring
    separators = (encoder.key_separator, encoder.item_separator)
    made: Callable[[Any, int], Sequence[str]] = c_make_encoder(
        None, encoder.default, strings, None, *separators, sort_keys, False, True
    )
    return made


def _shape(value: Any, level: int, memo: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(members printed, deepest nesting) of a JSON value; a container shared many times is walked once."""
    if not isinstance(value, list | tuple | dict):
        return 1, level
    known = memo.get(id(value))
    if known is not None:
        return known
    members, depth = 1, level + 1
    for member in value.values() if isinstance(value, dict) else value:
        count, deepest = _shape(member, level + 1, memo)
        members += count
        depth = max(depth, deepest)
    memo[id(value)] = (members, depth)
    return members, depth


def linear_sum(items: Iterable[Any], start: Any, limit: int) -> Any:
    """`sum(items, start)`, but lists (or tuples) are chained in linear time: Python's `sum` copies the running list
    at every step, one quadratic C call that no watchdog can interrupt."""
    if not isinstance(start, list | tuple):
        return sum(items, start)
    values = list(items)
    kind = type(start)
    for value in values:
        if not isinstance(value, kind):
            raise TypeError(f'can only concatenate {kind.__name__} (not "{type(value).__name__}") to {kind.__name__}')
    check(len(start) + sum(map(len, values)), limit, "sum's result")
    return kind(itertools.chain(start, *values))
