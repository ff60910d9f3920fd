"""The parameters form of a call's arguments (`<parameter=K>V</parameter>`, `<K>V</K>`): a parameter's pattern, its
value less the template's layout (a CDATA section unwrapped), parameters nested inside a value (MiniMax's), the
closing text that balances one, and the value typed from the tool's schema (`typed`, over `reply/values.py`)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from chatcaps.caps import CallFormat
from chatcaps.reply.holes import HOLES, pattern
from chatcaps.reply.values import coerce, python_literal, schema_types
from chatcaps.vocab import PLACEHOLDER, placeholder_pattern

CDATA_VALUE = r"(?P<value>(?:\s*<!\[CDATA\[.*?\]\]>|(?!\s*<!\[CDATA\[)).*?)"
"""A parameter's value where it may open with a CDATA section: the section is one piece of text, so the parameter's
closing text inside it (`<![CDATA[<p>x</param>]]>`) does not end the value, and a value that opens a section ends
only after the section does (a stream never takes a value cut inside one)."""


def parameter_pattern(calls: CallFormat) -> re.Pattern[str] | None:
    """The parameters form's pattern for one argument (`key`, `value`), where text follows the value: a parameter is
    then complete, and can stream, the moment that text is; None for other forms. The value is captured with the
    whitespace around it (`parameter_value` takes off the template's own layout only), a leading CDATA section
    whole (`CDATA_VALUE`)."""
    parameter = (calls.parameter or "").strip() if calls.arguments == "parameters" else ""
    before, _, after = parameter.partition("${value}")
    if not after.strip():
        return None
    # A flag the template writes `"true"` for a string value (DeepSeek V3.2's `string="true"`): captured, as the
    # model writes `"false"` where the value is JSON.
    text = re.sub(r'="true"', '="${flag}"', f"{before.rstrip()}${{value}}{after.lstrip()}", count=1)
    holes = {**HOLES, "value": CDATA_VALUE, "flag": r'(?P<flag>[^"]*)'}
    return re.compile(placeholder_pattern(text, holes), re.DOTALL)


def parameter_read(match: re.Match[str], schema: Any, calls: CallFormat) -> Any:
    """One parameter's value (a match of `parameter_pattern`): JSON where the format's type flag says it is not a
    string (`string="false"`: `42`, `true`, `[1, 2]`) and it parses, else typed from the tool's schema."""
    value = parameter_value(match["value"], calls)
    if match.groupdict().get("flag") == "false":
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            pass
    return typed(value, schema, calls)


def parameter_value(text: str, calls: CallFormat) -> str:
    r"""A parameter's value as the model wrote it, less the layout the template writes around a value (Qwen3-Coder's
    newline after `<parameter=K>` and before `</parameter>`, once each: `\n    print(x)\n` is `    print(x)`), and
    a value that is one CDATA section unwrapped (the XML way to write `<`, `&` and newlines, which MiniCPM5's
    template writes and asks for)."""
    lead, trail = _value_layout(calls.parameter or "")
    if lead and text.startswith(lead):
        text = text[len(lead) :]
    if trail and text.endswith(trail):
        text = text[: len(text) - len(trail)]
    if "<![CDATA[" not in text:
        return text
    section = re.fullmatch(r"\s*<!\[CDATA\[((?:(?!\]\]>).)*)\]\]>\s*", text, re.DOTALL)
    return section[1] if section else text


@lru_cache(maxsize=64)
def _value_layout(parameter: str) -> tuple[str, str]:
    """The whitespace a parameter's text writes right before and right after `${value}` (once per format: this runs
    for every parameter of a streamed call)."""
    before, _, after = parameter.strip().partition("${value}")
    return before[len(before.rstrip()) :], after[: len(after) - len(after.lstrip())]


def typed(value: str, schema: Any, calls: CallFormat | None = None, *, depth: int = 0) -> Any:
    """A parameter's text typed from its JSON schema as transformers' `ResponseParser` types tool-call arguments at
    close (`schema_types`, `coerce`): a call gives the same values streamed or not, and through
    `tokenizer.parse_response`. An object or array the model wrote as a Python literal (`{'len': 'm'}`, which
    Seed-OSS and MiniCPM5 models write), or, with `calls`, as the format's own parameters inside the value
    (`nested_parameters`), is read into JSON too; the latter only where the schema allows no string before the
    object or array (a string may hold any text: `oneOf` string or object reads such a value as the string)."""
    types = schema_types(schema)
    read = coerce(value, types) if types else value
    if read is value and {"object", "array"} & set(types):
        literal = python_literal(value)
        if (isinstance(literal, dict) and "object" in types) or (isinstance(literal, list) and "array" in types):
            return literal
        structured = next(name for name in types if name in ("object", "array", "string"))
        if calls is not None and structured != "string" and depth < NESTING_LIMIT:
            nested = nested_parameters(value, calls)
            if nested:
                return _nested(nested, schema, structured, calls, depth)
    return read


NESTING_LIMIT = 64
"""The deepest nesting of parameters read into JSON; a value nested deeper stays text."""


def _nested(members: list[tuple[str, str]], schema: Any, name: str, calls: CallFormat, depth: int) -> Any:
    """Parameters found inside a value as an object of their keys, or an array of their values (the key is the
    template's word for an item), as `name` says, each typed from its own schema."""
    branch = _branch(schema, name)
    if name == "array":
        return [typed(text, branch.get("items"), calls, depth=depth + 1) for _, text in members]
    properties = branch.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    return {key: typed(text, properties.get(key), calls, depth=depth + 1) for key, text in members}


def _branch(schema: Any, name: str) -> dict[str, Any]:
    """The part of a schema that allows the JSON type `name`: the schema itself or its first `anyOf`/`oneOf` choice
    that does (where `items` and `properties` are)."""
    if not isinstance(schema, dict):
        return {}
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or ():
            if name in schema_types(choice):
                return _branch(choice, name)
    return schema


def nested_parameters(text: str, calls: CallFormat) -> list[tuple[str, str]] | None:
    """`text` read as the format's own parameters, one after another and nothing else: MiniMax-M3 writes an object
    argument's members, and an array's items, as parameters inside the value (`<number><real>1.5</real>...
    </number>`, `<tags><item>a</item><item>b</item></tags>`). Each parameter's value runs to its own closing text,
    parameters inside it counted, so that values nested in values come out whole. The keys and values, the values
    less the template's layout; None where `text` is not such parameters (or holds none)."""
    found = _parameter_parts(calls.parameter or "") if calls.arguments == "parameters" else None
    if found is None:
        return None
    opening, closing = found
    members, at, text = list[tuple[str, str]](), 0, text.strip()
    while at < len(text):
        head = opening.match(text, at)
        if head is None or closing.match(text, at):
            return None
        end = _closing_of(text, head.end(), head["key"], opening, closing)
        if end is None:
            return None
        members.append((head["key"], parameter_value(text[head.end() : end.start()], calls)))
        at = end.end()
        while at < len(text) and text[at].isspace():
            at += 1
    return members or None


def balanced(match: re.Match[str], calls: CallFormat) -> re.Match[str] | None:
    """`match` (of `parameter_pattern`) as it is where its value holds no parameter of its own key; else, where the
    closing text names the key, the match running to the closing text that balances it (an array of arrays,
    `<item><item>a</item></item>`, whose first `</item>` the pattern stops at), None until that is in the text."""
    parts = _parameter_parts(calls.parameter or "")
    if parts is None or "key" not in parts[1].groupindex:
        return match
    opening, closing = parts
    text, key, start, end = match.string, match["key"], match.start("value"), match.end("value")
    inner = opening.search(text, start, end)
    while inner is not None and inner["key"] != key:
        inner = opening.search(text, inner.end(), end)
    if inner is None:
        return match
    found = _closing_of(text, start, key, opening, closing)
    return None if found is None else match.re.fullmatch(text, match.start(), found.end())


def _closing_of(
    text: str, at: int, key: str, opening: re.Pattern[str], closing: re.Pattern[str]
) -> re.Match[str] | None:
    """The closing text of the parameter `key` whose value begins at `at`: the first one not taken by a parameter
    opened inside the value. Where the closing text names its key (`</${key}>`), only parameters of `key` count, so
    a tag of a value's own text left open (`<br>`) is text; else every parameter does. An opening pattern may match
    a closing text too (`<${key}>` matches `</real>`): where both match at one place, it is a closing."""
    keyed = "key" in closing.groupindex

    def search(pattern: re.Pattern[str], start: int) -> re.Match[str] | None:
        found = pattern.search(text, start)
        while found is not None and keyed and found["key"] != key:
            found = pattern.search(text, found.end())
        return found

    depth, inner, end = 1, search(opening, at), search(closing, at)
    while end is not None:
        if inner is not None and inner.start() < end.start():
            depth, inner = depth + 1, search(opening, inner.end())
            continue
        depth -= 1
        if depth == 0:
            return end
        at = end.end()
        end = search(closing, at)
        if inner is not None and inner.start() < at:
            inner = search(opening, at)
    return None


@lru_cache(maxsize=64)
def _parameter_parts(parameter: str) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """Patterns for a parameter's opening text and its closing text, the key captured in each that writes it; None
    where the opening writes no key, the closing is empty or either has another hole."""
    before, _, after = parameter.strip().partition("${value}")
    holes = PLACEHOLDER.findall(before) + PLACEHOLDER.findall(after)
    if PLACEHOLDER.findall(before) != ["key"] or not after.strip() or set(holes) != {"key"}:
        return None
    return re.compile(pattern(before.strip())), re.compile(pattern(after.strip()))
