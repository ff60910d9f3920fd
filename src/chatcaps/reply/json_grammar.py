"""JSON Schema as grammar rules: one converter for every backend chatcaps constrains (llama.cpp reads the rules as
GBNF, xgrammar reads the same text, llguidance reads it through its `gbnf_to_lark`).

`JsonRules.rule(schema, name)` adds the rules for the JSON values that fit `schema` and returns the name of the rule
to refer to. Strings are JSON strings: no raw control character, only JSON's escapes (and no `\\u` escape of a
surrogate, so that a string is always text). Whitespace is bounded (one optional space after each token), numbers
have at most 16 digits, so that a model cannot loop on layout.

What a keyword asks for is enforced where a context-free grammar can say it: `$ref` (local, recursive too), `$defs`
and `definitions`, `anyOf`, `allOf` (merged), `oneOf` (as `anyOf`), `enum`, `const`, `type` lists, `nullable`,
`properties` in the schema's own order (what a template renders and a model writes) with `required`,
`additionalProperties` (`true` or a schema: other keys, none of the declared ones; absent beside `properties` (even
`{}`), as llama.cpp's and xgrammar's converters read it, no other key, a stricter grammar whose every value still
fits; a `strict` tool: no other key unless it is a schema), `items`, `prefixItems`, `minItems`/`maxItems`,
`minLength`/`maxLength`, `pattern` (a regular expression without look-around or back-references), `format` (date,
time, date-time, uuid, ipv4), integer `minimum`/`maximum` (exclusive ones too) and number bounds that are whole
numbers at or above 0. Annotations (`description`, `title`, `$schema`, ...) say nothing about the value. Any other
keyword, or one of these in a form the grammar cannot say, leaves the grammar looser for that keyword only, and
`JsonRules.loosened` names it. A schema that cannot be read at all (not an object, an unknown type, a `$ref` outside
the document, a contradiction) raises `SchemaError`, naming the keyword.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$comment",
        "$vocabulary",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "discriminator",
        "strict",
    }
)
"""Keywords that say nothing about which values fit (and `strict`, which some clients write into the schema)."""
TYPES = ("string", "number", "integer", "boolean", "null", "array", "object")
MAX_REPEAT = 256
"""The largest count a length or item bound is enforced up to: past it, the grammar is looser for that bound (each
counted repetition is a rule of its own in llama.cpp)."""
MAX_DIGITS = 16
_SPECIAL = '"\\' + "".join(map(chr, range(0x20))) + "\x7f"
"""What a JSON string never holds raw (the quote, the backslash, control characters; DEL as llama.cpp's own
converter)."""

PRIMITIVES = {
    "json-space": '" "?',
    "json-char": r'[^"\\\x00-\x1f\x7f] | json-escape',
    "json-escape": r'"\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )',
    "json-string": r'"\"" json-char* "\"" json-space',
    "json-text": "json-char*",
    "json-integer": '"-"? ( "0" | [1-9] [0-9]{0,15} ) json-space',
    "json-fraction": '"." [0-9]{1,16}',
    "json-number": '"-"? ( "0" | [1-9] [0-9]{0,15} ) json-fraction? ( [eE] [-+]? [0-9]{1,2} )? json-space',
    "json-boolean": '( "true" | "false" ) json-space',
    "json-null": '"null" json-space',
    "json-value": "json-object | json-array | json-string | json-number | json-boolean | json-null",
    "json-array": '"[" json-space ( json-value ( "," json-space json-value )* )? "]" json-space',
    "json-member": 'json-string ":" json-space json-value',
    "json-object": '"{" json-space ( json-member ( "," json-space json-member )* )? "}" json-space',
    "json-octet": '"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]',
}
"""The rules every schema's rules refer to: any JSON value of each type (`json-text`, a string's text, where the
grammar's strings keep out of its `stops`)."""
FORMATS = {
    "date": '[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] )',
    "time": '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] '
    '[0-9] | "2" [0-3] ) ":" [0-5] [0-9] )',
    "uuid": '[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}',
    "ipv4": '( json-octet "." ){3} json-octet',
}
FORMATS["date-time"] = f"{FORMATS['date']} [Tt] {FORMATS['time']}"
_NAME = re.compile(r"[^A-Za-z0-9]+")


class SchemaError(ValueError):
    """A schema the converter cannot read at all; `keyword` names what, `path` where (a JSON pointer)."""

    def __init__(self, keyword: str, path: str, why: str = "") -> None:
        super().__init__(f"{keyword} at {path}" + (f": {why}" if why else ""))
        self.keyword = keyword
        self.path = path


def gbnf_text(text: str) -> str:
    """`text` inside a GBNF string literal: backslash, quote and control characters escaped, other text as it is."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 else "\\" + c if c in '\\"' else c for c in text)


def gbnf_class(ranges: Sequence[tuple[int, int]], negated: bool = False) -> str:
    """A GBNF character class of code point ranges, every character written as an escape."""

    def code(point: int) -> str:
        return f"\\x{point:02x}" if point < 0x80 else f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"

    merged: list[list[int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    items = "".join(code(lo) if lo == hi else f"{code(lo)}-{code(hi)}" for lo, hi in merged)
    return f"[{'^' if negated else ''}{items}]"


def avoiding(
    rules: dict[str, str],
    name: str,
    markers: Sequence[str],
    literal: Callable[[str], str] | None = None,
    plain: str = "",
    escape: str | None = None,
) -> str:
    """A rule `name` (with the rules it needs, `name-lead` and `name-chunk`) for text that holds none of `markers`
    (nor `plain`'s characters, but in an `escape`); returns `name`. A character that starts no marker is text; one
    that does comes in a chunk: a marker's start (a prefix, written by `literal`) then a character that neither
    goes on with a marker nor starts one, or an escape; before a chunk, and at the end, any starts of markers.
    Where no marker holds its first characters' set past its start (tags: `<tool_call>`, `[ARGS]`), no marker can
    then run across two of these, so the text holds none; for other markers (`>>>`), each start is followed by a
    character that does not go on with it, which is not always enough (`>>` then `>>>`)."""
    spelled = literal or (lambda text: f'"{gbnf_text(text)}"')
    firsts = "".join(dict.fromkeys(marker[0] for marker in markers if marker))
    prefixes = [
        prefix
        for prefix in dict.fromkeys(marker[:size] for marker in markers for size in range(1, len(marker)))
        if prefix not in markers
    ]
    sound = all(not set(marker[1:]) & set(firsts) for marker in markers)

    def after(prefix: str) -> str:
        nexts = "".join(dict.fromkeys(marker[len(prefix)] for marker in markers if marker.startswith(prefix)))
        char = gbnf_class(_ranges(nexts + plain + (firsts if sound else "")), negated=True)
        return f"( {char} | {escape} )" if escape else char

    text = gbnf_class(_ranges(firsts + plain), negated=True)
    text = f"( {text} | {escape} )" if escape else text
    if not sound or not prefixes:
        branches = [text, *(f"{spelled(prefix)} {after(prefix)}" for prefix in prefixes)]
        rules[name] = f"( {' | '.join(branches)} )*"
        return name
    rules[f"{name}-lead"] = " | ".join(spelled(prefix) for prefix in prefixes)
    rules[f"{name}-chunk"] = " | ".join(f"{spelled(prefix)} {after(prefix)}" for prefix in prefixes)
    rules[name] = f"( {text} | {name}-lead* {name}-chunk )* {name}-lead*"
    return name


def sequence(rules: dict[str, str], name: str, items: Sequence[tuple[str, bool]], separator: str) -> str:
    """`items` (rule, required) in their order, joined by `separator`, each optional one free to be left out: an
    expression, with the rules it needs added to `rules` as `name-N`."""

    def rest(after: int) -> str:
        choices = []
        for at in range(after + 1, len(items)):
            tail = [f"{name}-{at}"] if at < len(items) - 1 else []
            choices.append(" ".join([*([separator] if after >= 0 else []), items[at][0], *tail]))
            if items[at][1]:
                break
        needed = any(must for _, must in items[after + 1 :])
        return f"( {' | '.join(choices)} )" + ("" if needed else "?")

    for at in range(len(items) - 1):
        rules[f"{name}-{at}"] = rest(at)
    return rest(-1) if items else '""'


@dataclass
class JsonRules:
    """The rules of every schema in one grammar (the primitives shared), and what they leave looser."""

    stops: tuple[str, ...] = ()
    """Texts a string never holds (written as an escape they still can: `<\\/tool_call>`): the markers that end a
    call, which a reader looks for before it reads the JSON."""
    rules: dict[str, str] = field(default_factory=dict)
    loosened: list[str] = field(default_factory=list)
    """`keyword at path` (a JSON pointer into the schema), for each keyword the rules do not enforce."""
    made: dict[tuple[str, str, str | None, bool], str] = field(default_factory=dict)
    """The rule already made for a name, schema, root and strictness (a call written twice refers to one rule)."""

    def rule(
        self, schema: Any, name: str, *, root: Any = None, path: str = "#", strict: bool = False, label: str = ""
    ) -> str:
        """The rule for the values fitting `schema` (a part of `root` at `path`, whose `$ref`s it resolves; itself
        by default), named `name` or a primitive's name; `strict`: no object key beyond its declared properties.
        `label` prefixes what `loosened` says. Raises `SchemaError`, leaving the rules as they were."""
        key = (name, json.dumps(schema), None if root is None else json.dumps(root), strict)
        if key in self.made:
            return self.made[key]
        saved, notes = dict(self.rules), len(self.loosened)
        visit = _Visit(self, schema if root is None else root, strict, label)
        try:
            found = visit.value(schema, name, path)
        except SchemaError:
            self.rules, self.loosened = saved, self.loosened[:notes]
            raise
        except (RecursionError, TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
            self.rules, self.loosened = saved, self.loosened[:notes]
            raise SchemaError("schema", "#", f"unreadable ({type(error).__name__})") from error
        if not re.fullmatch(r"[A-Za-z0-9-]+", found):
            self.rules[name] = found
            found = name
        self.made[key] = found
        return found

    def lines(self) -> list[str]:
        """The rules as GBNF lines: each schema's own, then the primitives they share, in `PRIMITIVES`' order."""
        own = [name for name in self.rules if not name.startswith("json-")]
        shared = [
            found
            for name in PRIMITIVES
            for found in (*(rule for rule in self.rules if rule.startswith(f"{name}-")), name)
            if found in self.rules
        ]
        return [f"{name} ::= {self.rules[name]}" for name in (*own, *shared)]

    def flat(self, schema: Any, *, root: Any = None) -> dict[str, Any]:
        """`schema` (a part of `root`, itself by default) with its own `$ref` and `allOf` merged in, for a call form
        that reads an object's `properties` itself (one rule per parameter). Raises `SchemaError` where that cannot
        be read."""
        try:
            flat = _Visit(self, schema if root is None else root, False, "").flat(schema, "#", 0)
        except (RecursionError, TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
            if isinstance(error, SchemaError):
                raise
            raise SchemaError("schema", "#", f"unreadable ({type(error).__name__})") from error
        if not isinstance(flat.get("properties", {}), Mapping):
            raise SchemaError("properties", "#", "not an object")
        return flat

    def note(self, text: str) -> None:
        """Add `text` to `loosened`, once."""
        if text not in self.loosened:
            self.loosened.append(text)

    def primitive(self, name: str) -> str:
        """`name`, one of `PRIMITIVES`, added with the primitives it refers to."""
        if name not in self.rules:
            body = PRIMITIVES[name]
            if name == "json-string" and self.stops:
                body = body.replace("json-char*", "json-text")
            elif name == "json-text" and self.stops:
                body = self.rules[avoiding(self.rules, name, self.stops, plain=_SPECIAL, escape="json-escape")]
            self.rules[name] = body
            for word in re.findall(r"json-[a-z]+", body):
                self.primitive(word)
        return name


class _Visit:
    """One schema's conversion: its `$ref`s resolved against `root`, each to one rule (recursion included)."""

    def __init__(self, rules: JsonRules, root: Any, strict: bool, label: str) -> None:
        self.out = rules
        self.root = root
        self.strict = strict
        self.label = label
        self.refs: dict[str, str] = {}
        self.leading: set[str] = set()
        """The `$ref`s being written with no text of their own before the value now written."""

    def loose(self, keyword: str, path: str) -> None:
        self.out.note(f"{self.label}{keyword} at {path}")

    def define(self, name: str, body: str) -> str:
        base, number = name, 1
        while name in self.out.rules:
            number += 1
            name = f"{base}-{number}"
        self.out.rules[name] = body
        for word in re.findall(r"json-[a-z]+", body):
            if word in PRIMITIVES:
                self.out.primitive(word)
        return name

    def value(self, schema: Any, name: str, path: str) -> str:
        """An expression (a rule name, or a body for a rule of its own) for the values fitting `schema`."""
        if schema is True or (isinstance(schema, Mapping) and not _constraining(schema)):
            return self.out.primitive("json-value")
        if schema is False:
            raise SchemaError("false", path, "no value fits")
        if not isinstance(schema, Mapping):
            raise SchemaError("schema", path, "not an object")
        ref = schema.get("$ref")
        if isinstance(ref, str) and not _constraining(schema, "$ref"):
            return self.ref(ref, name, path)
        flat = self.flat(schema, path, 0)
        for union in ("anyOf", "oneOf"):
            branches = flat.pop(union, None)
            if branches is None:
                continue
            if not isinstance(branches, list) or not branches:
                raise SchemaError(union, path, "not a list of schemas")
            if union == "oneOf" and len(branches) > 1:
                self.loose("oneOf (only one)", path)
            rest = {key: value for key, value in flat.items() if key not in ("anyOf", "oneOf")}
            extra: dict[str, Any] = {key: flat[key] for key in ("anyOf", "oneOf") if key in flat}
            alternatives = []
            for at, branch in enumerate(branches):
                where = f"{path}/{union}/{at}"
                if isinstance(branch, Mapping) and (_constraining(rest) or extra):
                    branch = _merge({**rest, **extra}, self.flat(branch, where, 0), self, where)
                elif _constraining(rest) or extra:
                    branch = {**rest, **extra} if branch is True else branch
                try:
                    alternatives.append(self.named(branch, f"{name}-{at}", where))
                except SchemaError as error:
                    if error.keyword not in ("false", "allOf", "enum", "const", "minimum"):
                        raise
            if not alternatives:
                raise SchemaError(union, path, "no branch fits")
            return " | ".join(dict.fromkeys(alternatives))
        return self.typed(flat, name, path)

    def named(self, schema: Any, name: str, path: str) -> str:
        """`value` as one rule name (a rule of its own where it is an expression)."""
        found = self.value(schema, name, path)
        return found if re.fullmatch(r"[A-Za-z0-9-]+", found) else self.define(name, found)

    def ref(self, ref: str, name: str, path: str) -> str:
        """The rule for a `$ref`'s target, one per target; a target that comes back to itself before any text of
        its own (`{"$ref": "#"}`, `anyOf` through itself) is no grammar (llama.cpp refuses left recursion)."""
        if ref in self.leading:
            raise SchemaError("$ref", path, f"{ref!r} refers to itself before any text")
        if ref not in self.refs:
            target = self.pointer(ref, path)
            rule = self.define(f"{name}-ref" if not ref.startswith("#/") else _rule_name(name, ref), '""')
            self.refs[ref] = rule
            self.leading.add(ref)
            try:
                self.out.rules[rule] = self.value(target, rule, ref)
            finally:
                self.leading.discard(ref)
        return self.refs[ref]

    def inside(self, schema: Any, name: str, path: str) -> str:
        """`named` for a value inside an array or object: after its opening text, so any `$ref` may recur."""
        leading, self.leading = self.leading, set()
        try:
            return self.named(schema, name, path)
        finally:
            self.leading = leading

    def pointer(self, ref: str, path: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaError("$ref", path, f"{ref!r} is outside the schema")
        found = self.root
        for part in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(found, Mapping) and part in found:
                found = found[part]
            elif isinstance(found, list) and part.isdigit() and int(part) < len(found):
                found = found[int(part)]
            else:
                raise SchemaError("$ref", path, f"{ref!r} names nothing in the schema")
        return found

    def flat(self, schema: Any, path: str, depth: int) -> dict[str, Any]:
        """`schema` with its `$ref` (beside other keywords) and `allOf` merged in."""
        if depth > 16:
            raise SchemaError("$ref", path, "refers to itself through allOf")
        if schema is True:
            return {}
        if not isinstance(schema, Mapping):
            raise SchemaError("schema", path, "not an object")
        flat = {key: value for key, value in schema.items() if key not in ("$ref", "allOf")}
        ref = schema.get("$ref")
        if isinstance(ref, str):
            flat = _merge(self.flat(self.pointer(ref, path), ref, depth + 1), flat, self, path)
        parts = schema.get("allOf")
        if parts is not None:
            if not isinstance(parts, list):
                raise SchemaError("allOf", path, "not a list of schemas")
            for at, part in enumerate(parts):
                where = f"{path}/allOf/{at}"
                flat = _merge(flat, self.flat(part, where, depth + 1), self, where)
        return flat

    def typed(self, schema: dict[str, Any], name: str, path: str) -> str:
        types = self.types(schema, path)
        for keyword in schema:
            if keyword not in _KNOWN and keyword not in ANNOTATIONS and not keyword.startswith("x-"):
                self.loose(keyword, path)
        if "const" in schema or "enum" in schema:
            return self.literals(schema, types, path)
        if types is None:
            return self.out.primitive("json-value")
        if "number" in types and "integer" in types:
            types = [kind for kind in types if kind != "integer"]
        branches = [self.kind(kind, schema, f"{name}-{kind}" if len(types) > 1 else name, path) for kind in types]
        return " | ".join(branches)

    def types(self, schema: Mapping[str, Any], path: str) -> list[str] | None:
        """The JSON types `schema` allows, None for any: `type`, else those its keywords apply to."""
        declared = schema.get("type")
        if declared is None:
            inferred = [kind for kind, words in _TYPE_WORDS.items() if any(word in schema for word in words)]
            found = inferred or None
        else:
            names = [declared] if isinstance(declared, str) else declared
            if not isinstance(names, list) or not all(isinstance(kind, str) and kind in TYPES for kind in names):
                raise SchemaError("type", path, f"{declared!r} is not a JSON type")
            found = list(dict.fromkeys(names))
            if not found:
                raise SchemaError("type", path, "no type")
        if schema.get("nullable") is True and found is not None and "null" not in found:
            found.append("null")
        return found

    def literals(self, schema: Mapping[str, Any], types: list[str] | None, path: str) -> str:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise SchemaError("enum", path, "not a list")
        fitting = [value for value in values if types is None or _fits(_json_type(value), types)]
        if not fitting:
            raise SchemaError("enum" if "enum" in schema else "const", path, "no value fits the type")
        space = self.out.primitive("json-space")
        texts = dict.fromkeys(json.dumps(value, ensure_ascii=False) for value in fitting)
        return " | ".join(f'"{gbnf_text(text)}" {space}' for text in texts)

    def kind(self, kind: str, schema: Mapping[str, Any], name: str, path: str) -> str:
        if kind == "string":
            return self.string(schema, name, path)
        if kind == "integer":
            return self.integer(schema, name, path)
        if kind == "number":
            return self.number(schema, name, path)
        if kind == "array":
            return self.array(schema, name, path)
        if kind == "object":
            return self.object(schema, name, path)
        return self.out.primitive(f"json-{kind}")

    def string(self, schema: Mapping[str, Any], name: str, path: str) -> str:
        pattern, form = schema.get("pattern"), schema.get("format")
        lengths = [key for key in ("minLength", "maxLength") if key in schema]
        body = None
        if isinstance(pattern, str):
            try:
                body = _Regex(pattern, self.out).rule()
            except _Unsupported:
                self.loose("pattern", path)
        elif pattern is not None:
            self.loose("pattern", path)
        if body is None and form in FORMATS:
            body = FORMATS[str(form)]
        elif form is not None:
            self.loose("format", path)
        if body is not None:
            for key in lengths:
                self.loose(key, path)
            return self.define(name, f'"\\"" {body} "\\"" {self.out.primitive("json-space")}')
        if not lengths:
            return self.out.primitive("json-string")
        low, high = self.count(schema, "minLength", "maxLength", path)
        char = self.out.primitive("json-char")
        return self.define(name, f'"\\"" {_repeat(char, low, high)} "\\"" {self.out.primitive("json-space")}')

    def count(self, schema: Mapping[str, Any], least: str, most: str, path: str) -> tuple[int, int | None]:
        """A lower and upper count (None: none) from two keywords, each enforced up to `MAX_REPEAT`."""
        low, high = schema.get(least, 0), schema.get(most)
        if not _whole(low) or low < 0:
            raise SchemaError(least, path, "not a count")
        if high is not None and (not _whole(high) or high < low):
            raise SchemaError(most, path, "not a count at or above the least")
        if low > MAX_REPEAT:
            self.loose(least, path)
            low = 0
        if high is not None and high > MAX_REPEAT:
            self.loose(most, path)
            high = None
        return int(low), None if high is None else int(high)

    def bounds(self, schema: Mapping[str, Any], path: str) -> tuple[float | None, float | None, bool, bool]:
        """The lower and upper bound, and whether each excludes itself (draft 4's boolean form read too)."""
        low, high = schema.get("minimum"), schema.get("maximum")
        low_out = high_out = False
        for key, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            value = schema.get(key)
            if value is True:
                low_out, high_out = (True, high_out) if inclusive == "minimum" else (low_out, True)
            elif _number(value) and inclusive == "minimum" and (low is None or value >= low):
                low, low_out = value, True
            elif _number(value) and inclusive == "maximum" and (high is None or value <= high):
                high, high_out = value, True
        for key, bound in (("minimum", low), ("maximum", high)):
            if bound is not None and not _number(bound):
                raise SchemaError(key, path, "not a number")
        return low, high, low_out, high_out

    def integer(self, schema: Mapping[str, Any], name: str, path: str) -> str:
        if "multipleOf" in schema:
            self.loose("multipleOf", path)
        low, high, low_out, high_out = self.bounds(schema, path)
        if low is None and high is None:
            return self.out.primitive("json-integer")
        least = most = None
        if low is not None:
            least = math.floor(low) + 1 if low_out and low == math.floor(low) else math.ceil(low)
        if high is not None:
            most = math.ceil(high) - 1 if high_out and high == math.ceil(high) else math.floor(high)
        if least is not None and most is not None and least > most:
            raise SchemaError("minimum", path, "no integer fits the bounds")
        return self.define(name, f"( {_integers(least, most)} ) {self.out.primitive('json-space')}")

    def number(self, schema: Mapping[str, Any], name: str, path: str) -> str:
        if "multipleOf" in schema:
            self.loose("multipleOf", path)
        low, high, low_out, high_out = self.bounds(schema, path)
        if low is None and high is None:
            return self.out.primitive("json-number")
        whole = all(bound is None or bound == math.floor(bound) for bound in (low, high))
        if low is None or low < 0 or low_out or high_out or not whole or (high is not None and high < low):
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if key in schema:
                    self.loose(key, path)
            return self.out.primitive("json-number")
        fraction = self.out.primitive("json-fraction")
        space = self.out.primitive("json-space")
        if high is None:
            return self.define(name, f"( {_integers(int(low), None)} ) {fraction}? {space}")
        top = f'"{int(high)}" ( "." "0"{{1,16}} )?'
        if high == low:
            return self.define(name, f"{top} {space}")
        return self.define(name, f"( ( {_integers(int(low), int(high) - 1)} ) {fraction}? | {top} ) {space}")

    def array(self, schema: Mapping[str, Any], name: str, path: str) -> str:
        for key in ("uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems"):
            if schema.get(key) not in (None, False):
                self.loose(key, path)
        prefix, items = schema.get("prefixItems"), schema.get("items")
        if isinstance(items, list):  # draft 4's tuple form
            prefix, items = items, schema.get("additionalItems")
        space = self.out.primitive("json-space")
        separator = f'"," {space}'
        low, high = self.count(schema, "minItems", "maxItems", path)
        if isinstance(prefix, list) and prefix:
            if low or high is not None:
                self.loose("minItems" if low else "maxItems", path)
            firsts = [self.inside(item, f"{name}-{at}", f"{path}/prefixItems/{at}") for at, item in enumerate(prefix)]
            listed = ""
            for at, item in reversed(list(enumerate(firsts))):  # each item only after the ones before it
                listed = f"( {separator if at else ''} {item} {listed} )?"
            body = listed
            if items is not False:
                more = self.inside(items if items is not None else True, f"{name}-item", f"{path}/items")
                body = f"{listed} ( {separator} {more} )*"
            return self.define(name, f'"[" {space} {body} "]" {space}')
        if (items is None or items is True) and not low and high is None:
            return self.out.primitive("json-array")
        item = self.inside(items if items is not None else True, f"{name}-item", f"{path}/items")
        if high == 0 or items is False:
            return self.define(name, f'"[" {space} "]" {space}')
        tail = _repeat(f"( {separator} {item} )", max(low - 1, 0), None if high is None else high - 1)
        body = f"{item} {tail}" if low else f"( {item} {tail} )?"
        return self.define(name, f'"[" {space} {body} "]" {space}')

    def object(self, schema: Mapping[str, Any], name: str, path: str) -> str:
        for key in ("patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired"):
            if key in schema:
                self.loose(key, path)
        for key in ("dependentSchemas", "dependencies"):
            if key in schema:
                self.loose(key, path)
        properties = schema.get("properties") or {}
        if not isinstance(properties, Mapping):
            raise SchemaError("properties", path, "not an object")
        required = [key for key in schema.get("required") or () if isinstance(key, str)]
        closed = "properties" in schema  # an object that declares no properties at all is any object
        other = schema.get("additionalProperties", schema.get("unevaluatedProperties", not closed))
        if self.strict and not isinstance(other, Mapping):
            other = False
        declared = dict(properties)
        for key in required:
            if key not in declared:
                if other is False:
                    raise SchemaError("required", path, f"{key!r} is required but not allowed")
                declared[key] = other if isinstance(other, Mapping) else True
        if not declared and (other is True or (isinstance(other, Mapping) and not _constraining(other))):
            return self.out.primitive("json-object")
        space = self.out.primitive("json-space")
        separator = f'"," {space}'
        items = []
        for at, (key, spec) in enumerate(declared.items()):
            if spec is False:
                if key in required:
                    raise SchemaError("required", path, f"{key!r} is required but its schema is false")
                continue
            value = self.inside(spec, _rule_name(name, key, at), f"{path}/properties/{_pointer(key)}")
            text = gbnf_text(json.dumps(key, ensure_ascii=False))
            kv = self.define(f"{_rule_name(name, key, at)}-kv", f'"{text}" {space} ":" {space} {value}')
            items.append((kv, key in required))
        listed = sequence(self.out.rules, f"{name}-props", items, separator)
        if other is False:
            return self.define(name, f'"{{" {space} {listed} "}}" {space}')
        extra_value = self.inside(other if isinstance(other, Mapping) else True, f"{name}-other", f"{path}/other")
        key = self.other_key(list(declared), f"{name}-key")
        extra = self.define(f"{name}-extra", f'{key} ":" {space} {extra_value}')
        more = f"( {separator} {extra} )*"
        if any(must for _, must in items):
            body = f"{listed} {more}"
        elif items:
            first = listed[: -len("?")] if listed.endswith("?") else listed
            body = f"( {first} {more} | {extra} {more} )?"
        else:
            body = f"( {extra} {more} )?"
        return self.define(name, f'"{{" {space} {body} "}}" {space}')

    def other_key(self, keys: Sequence[str], name: str) -> str:
        """A JSON string that is none of `keys` (so that an undeclared key cannot repeat a declared one, whose
        value a reader would then take from the last): its text written out, escapes left to the declared keys."""
        char = self.out.primitive("json-char")

        def node(prefix: str) -> str:
            nexts = sorted({key[len(prefix)] for key in keys if key.startswith(prefix) and len(key) > len(prefix)})
            branches = [f'"{gbnf_text(c)}" {node(prefix + c)}' for c in nexts]
            branches.append(f"{gbnf_class(_ranges(_SPECIAL + ''.join(nexts)), negated=True)} {char}*")
            if prefix not in keys:
                branches.append('""')
            return self.define(f"{name}-{len(prefix)}", " | ".join(branches))

        return self.define(name, f'"\\"" {node("")} "\\"" {self.out.primitive("json-space")}')


_TYPE_WORDS = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties"),
}
"""The types each keyword applies to: a schema without `type` that has one of them is held to those types (stricter
than JSON Schema, which lets any other type through, but every value written then fits)."""
_KNOWN = frozenset(
    {
        "type",
        "enum",
        "const",
        "nullable",
        "anyOf",
        "oneOf",
        "properties",
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "items",
        "prefixItems",
        "additionalItems",
        *(word for words in _TYPE_WORDS.values() for word in words),
        "minContains",
        "maxContains",
        "unevaluatedItems",
        "propertyNames",
        "maxProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
    }
)
"""Keywords `_Visit.typed` reads itself (each enforced or reported where it reads it)."""


def unchecked(schema: Any, path: str = "#") -> list[str]:
    """`keyword at path` for each keyword in `schema` that a literal syntax other than JSON (Python's, the quoted
    form's, a parameter's raw text) does not check: what its types, enums, items and properties do not say."""
    if not isinstance(schema, Mapping):
        return []
    found = [f"{key} at {path}" for key in schema if key in _UNCHECKED]
    properties = schema.get("properties")
    for key, spec in properties.items() if isinstance(properties, Mapping) else ():
        found += unchecked(spec, f"{path}/properties/{_pointer(str(key))}")
    if isinstance(schema.get("items"), Mapping):
        found += unchecked(schema["items"], f"{path}/items")
    return found


_UNCHECKED = frozenset(
    {"pattern", "format", "minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum", "multipleOf"}
    | {"exclusiveMinimum", "exclusiveMaximum", "$ref", "allOf", "required", "additionalProperties", "uniqueItems"}
)
"""What `unchecked` reports."""


def _constraining(schema: Mapping[str, Any], *but: str) -> bool:
    """Whether `schema` has any keyword but annotations (and `but`)."""
    return any(key not in ANNOTATIONS and key not in but and not key.startswith("x-") for key in schema)


def _merge(first: Mapping[str, Any], second: Mapping[str, Any], visit: _Visit, path: str) -> dict[str, Any]:
    """Two schemas that must both hold, as one (`allOf`, a `$ref` beside other keywords)."""
    merged = dict(first)
    banned = []  # a side's `additionalProperties: false` holds for the other side's properties too
    for closed, other in ((first, second), (second, first)):
        own, theirs = closed.get("properties") or {}, other.get("properties") or {}
        if closed.get("additionalProperties") is False and isinstance(theirs, Mapping):
            banned += [key for key in theirs if key not in own]
    for key, value in second.items():
        if key not in merged or key in ANNOTATIONS:
            merged[key] = value
            continue
        mine = merged[key]
        if key == "properties" and isinstance(mine, Mapping) and isinstance(value, Mapping):
            both = dict(mine)
            for name, spec in value.items():
                both[name] = {"allOf": [both[name], spec]} if name in both else spec
            merged[key] = both
        elif key == "required" and isinstance(mine, list) and isinstance(value, list):
            merged[key] = list(dict.fromkeys([*mine, *value]))
        elif key == "type":
            mine_types = [mine] if isinstance(mine, str) else list(mine)
            their = [value] if isinstance(value, str) else list(value)
            common = [kind for kind in mine_types if kind in their or (kind == "integer" and "number" in their)]
            common += [kind for kind in their if kind == "integer" and "number" in mine_types and kind not in common]
            if not common:
                raise SchemaError("allOf", path, "no type fits both")
            merged[key] = common
        elif key == "enum" and isinstance(mine, list) and isinstance(value, list):
            merged[key] = [item for item in mine if item in value]
        elif key in ("minimum", "minLength", "minItems", "exclusiveMinimum") and _number(mine) and _number(value):
            merged[key] = max(mine, value)
        elif key in ("maximum", "maxLength", "maxItems", "exclusiveMaximum") and _number(mine) and _number(value):
            merged[key] = min(mine, value)
        elif key in ("items", "additionalProperties") and mine is not False and value is not False:
            merged[key] = {"allOf": [mine, value]}
        elif key in ("items", "additionalProperties"):
            merged[key] = False
        elif key in ("anyOf", "oneOf") and isinstance(mine, list) and isinstance(value, list):
            merged[key] = [{"allOf": [left, right]} for left in mine for right in value]
        elif mine != value:
            visit.loose(f"allOf ({key})", path)
    if banned:
        merged["properties"] = {**merged.get("properties", {}), **dict.fromkeys(banned, False)}
    return merged


class _Unsupported(ValueError):
    """A regular expression the grammar cannot say."""


class _Regex:
    """A `pattern` (ECMA-262 as JSON Schema reads it, searched, not matched whole) as the rules for a JSON string's
    text: each character in its JSON spelling (a quote or backslash escaped, a control character as its escape);
    classes and `.` without the characters a JSON string never holds raw (stricter, so every string written fits).
    Look-around, back-references, word boundaries, flags and Unicode classes are refused (`_Unsupported`)."""

    def __init__(self, pattern: str, out: JsonRules) -> None:
        self.text = pattern
        self.at = 0
        self.out = out

    def rule(self) -> str:
        text = self.text
        start = text.startswith("^")
        end = text.endswith("$") and not text.endswith("\\$")
        self.text = text[1 if start else 0 : len(text) - 1 if end else len(text)]
        body = self.alternatives()
        if self.at != len(self.text):
            raise _Unsupported(self.text)
        char = self.out.primitive("json-char")
        return " ".join([*([] if start else [f"{char}*"]), f"( {body} )", *([] if end else [f"{char}*"])])

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def alternatives(self) -> str:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            branches.append(self.sequence())
        return " | ".join(branches)

    def sequence(self) -> str:
        items = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.quantified(self.atom()))
        return " ".join(items) or '""'

    def atom(self) -> str:
        char = self.peek()
        self.at += 1
        if char == "(":
            if self.text.startswith("?:", self.at):
                self.at += 2
            elif self.text.startswith("?P<", self.at) or (
                self.text.startswith("?<", self.at) and self.text[self.at + 2 : self.at + 3] not in ("=", "!")
            ):
                self.at = self.text.index(">", self.at) + 1
            elif self.peek() == "?":
                raise _Unsupported("(?")
            inner = self.alternatives()
            if self.peek() != ")":
                raise _Unsupported("(")
            self.at += 1
            return f"( {inner} )"
        if char == "[":
            return self.klass()
        if char == ".":
            return gbnf_class(_ranges(_SPECIAL), negated=True)
        if char in "^$*+?{})]":
            raise _Unsupported(char)
        if char == "\\":
            return self.escape()
        return _spelled(char)

    def escape(self) -> str:
        char = self.peek()
        self.at += 1
        if char in _CLASSES:
            return self.spelled_set(_CLASSES[char], negated=False)
        if char in _NEGATED:
            return gbnf_class(_ranges(_SPECIAL + _CLASS_TEXT[char.lower()]), negated=True)
        return _spelled(self.escaped(char))

    def escaped(self, char: str) -> str:
        """The character an escape other than a class stands for."""
        simple = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
        if char in simple:
            return simple[char]
        if char in ("u", "x"):
            size = 4 if char == "u" else 2
            digits = self.text[self.at : self.at + size]
            if len(digits) != size or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise _Unsupported("\\" + char)
            self.at += size
            return chr(int(digits, 16))
        if char.isalnum() or not char:
            raise _Unsupported("\\" + char)
        return char

    def klass(self) -> str:
        negated = self.peek() == "^"
        if negated:
            self.at += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while self.peek() and (self.peek() != "]" or first):
            first = False
            char = self.peek()
            self.at += 1
            if char == "\\":
                name = self.peek()
                if name in _CLASSES:
                    self.at += 1
                    ranges += _CLASSES[name]
                    continue
                if name in _NEGATED:
                    raise _Unsupported("\\" + name)
                self.at += 1
                char = self.escaped(name)
            low = ord(char)
            if self.peek() == "-" and self.text[self.at + 1 : self.at + 2] not in ("]", ""):
                self.at += 1
                high_char = self.peek()
                self.at += 1
                if high_char == "\\":
                    name = self.peek()
                    self.at += 1
                    high_char = self.escaped(name)
                ranges.append((low, ord(high_char)))
            else:
                ranges.append((low, low))
        if self.peek() != "]":
            raise _Unsupported("[")
        self.at += 1
        if negated:
            return gbnf_class(_ranges(_SPECIAL) + ranges, negated=True)
        return self.spelled_set(ranges, negated=False)

    def spelled_set(self, ranges: Sequence[tuple[int, int]], negated: bool) -> str:
        """The characters of `ranges` as a JSON string writes them: the plain ones a class, the special ones (quote,
        backslash, control characters) their escapes."""
        plain = _subtract(ranges, _SPECIAL)
        special = [
            chr(point) for low, high in ranges for point in range(low, min(high, 0x7F) + 1) if chr(point) in _SPECIAL
        ]
        branches = ([gbnf_class(plain)] if plain else []) + [_spelled(char) for char in dict.fromkeys(special)]
        if not branches:
            raise _Unsupported("[]")
        return branches[0] if len(branches) == 1 else f"( {' | '.join(branches)} )"

    def quantified(self, atom: str) -> str:
        char = self.peek()
        if char in ("*", "+", "?"):
            self.at += 1
            found = (
                f"{atom}{char}" if re.fullmatch(r"[A-Za-z0-9-]+|\[.*\]|\(.*\)|\".*\"", atom) else f"( {atom} ){char}"
            )
        elif char == "{" and re.match(r"\{\d+(,\d*)?\}", self.text[self.at :]):
            match = re.match(r"\{(\d+)(,(\d*))?\}", self.text[self.at :])
            assert match is not None
            self.at += match.end()
            low = int(match.group(1))
            high = low if match.group(2) is None else int(match.group(3)) if match.group(3) else None
            if low > MAX_REPEAT or (high is not None and (high > MAX_REPEAT or high < low)):
                raise _Unsupported("{")
            found = _repeat(f"( {atom} )", low, high)
        else:
            return atom
        if self.peek() in ("?", "+"):  # lazy or possessive: the same strings
            self.at += 1
        return found


_CLASS_TEXT = {"d": "0123456789", "s": " \t\n\r\f\v", "w": ""}
_CLASSES: dict[str, list[tuple[int, int]]] = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x20, 0x20), (0x09, 0x0D)],
}
_NEGATED = {"D": "d", "S": "s", "W": "w"}
_CLASS_TEXT["w"] = "".join(chr(p) for low, high in _CLASSES["w"] for p in range(low, high + 1))


def _spelled(char: str) -> str:
    """One character as a GBNF literal of its JSON spelling."""
    short = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
    text = short.get(char) or (f"\\u{ord(char):04x}" if ord(char) < 0x20 or char == "\x7f" else char)
    return f'"{gbnf_text(text)}"'


def _ranges(chars: str) -> list[tuple[int, int]]:
    return [(ord(c), ord(c)) for c in dict.fromkeys(chars)]


def _subtract(ranges: Sequence[tuple[int, int]], chars: str) -> list[tuple[int, int]]:
    """`ranges` less the code points of `chars`."""
    cut = sorted({ord(c) for c in chars})
    found = []
    for low, high in ranges:
        start = low
        for point in cut:
            if start <= point <= high:
                if start < point:
                    found.append((start, point - 1))
                start = point + 1
        if start <= high:
            found.append((start, high))
    return found


def _repeat(item: str, low: int, high: int | None) -> str:
    """`item` from `low` to `high` times (None: any number)."""
    if high is None:
        return f"{item}*" if low == 0 else f"{item}+" if low == 1 else f"{item}{{{low},}}"
    if low == high:
        return "" if low == 0 else item if low == 1 else f"{item}{{{low}}}"
    return f"{item}?" if (low, high) == (0, 1) else f"{item}{{{low},{high}}}"


def _integers(low: int | None, high: int | None) -> str:
    """The decimal integers from `low` to `high` (None: unbounded, within 16 digits), as GBNF alternatives."""
    branches = []
    if high is None or high >= 0:
        branches += _naturals(max(low or 0, 0), high)
    if low is None or low < 0:
        least = -high if high is not None and high < 0 else 1
        negative = _naturals(least, None if low is None else -low)
        branches.append(f'"-" ( {" | ".join(negative)} )')
    return " | ".join(branches)


def _naturals(low: int, high: int | None) -> list[str]:
    """The integers from `low` (0 or more) to `high`, as alternatives, one per number of digits."""
    branches = []
    top = MAX_DIGITS if high is None else len(str(high))
    for digits in range(len(str(low)), top + 1):
        least = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        most = 10**digits - 1 if high is None else min(high, 10**digits - 1)
        if high is None and digits > len(str(low)):
            branches.append(_repeat("[0-9]", digits - 1, MAX_DIGITS - 1).join(["[1-9] ", ""]))
            break
        if least <= most:
            branches.append(_wrap(_digits(str(least), str(most))))
    return branches


def _digits(low: str, high: str) -> list[str]:
    """The numbers from `low` to `high`, strings of one length, as alternatives."""
    if low == high:
        return [f'"{low}"']
    if low[0] == high[0]:
        return [f'"{low[0]}" {_wrap(_digits(low[1:], high[1:]))}']
    rest = len(low) - 1
    tail = f" [0-9]{{{rest}}}" if rest > 1 else " [0-9]" if rest == 1 else ""
    start, end, branches, last = int(low[0]), int(high[0]), [], []
    if low[1:] != "0" * rest:
        branches.append(f'"{low[0]}" {_wrap(_digits(low[1:], "9" * rest))}')
        start += 1
    if high[1:] != "9" * rest:
        last.append(f'"{high[0]}" {_wrap(_digits("0" * rest, high[1:]))}')
        end -= 1
    if start <= end:
        branches.append((f'"{start}"' if start == end else f"[{start}-{end}]") + tail)
    return branches + last


def _wrap(branches: Sequence[str]) -> str:
    return branches[0] if len(branches) == 1 else f"( {' | '.join(branches)} )"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    return "string" if isinstance(value, str) else "array" if isinstance(value, list) else "object"


def _fits(kind: str, types: Sequence[str]) -> bool:
    return kind in types or (kind == "integer" and "number" in types)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return _number(value) and value == math.floor(value)


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _rule_name(name: str, key: str, at: int | None = None) -> str:
    """A rule name under `name` for a property or a `$ref` target (GBNF names: letters, digits and `-`)."""
    word = _NAME.sub("-", key.rsplit("/", 1)[-1]).strip("-").lower()
    return f"{name}-{word or ('ref' if at is None else at)}"
