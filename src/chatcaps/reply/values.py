"""A tool-call argument's text as a JSON value: typed from its JSON schema as transformers' `ResponseParser` types
arguments at close (`schema_types`, `coerce`: its rules, written here, as they are private there; tests/reply pin the
parity), and a value written as a Python literal read as JSON data (`python_literal`)."""

from __future__ import annotations

import ast
import json
import math
from typing import Any

LITERAL_LIMIT = 100_000
"""The longest value read as a Python literal (`ast.literal_eval` parses the whole text)."""


def python_literal(text: str) -> Any:
    """`text` as a Python literal that is also JSON data; None where it is none (or too long to try)."""
    if len(text) > LITERAL_LIMIT:
        return None
    try:
        literal = ast.literal_eval(text.strip())
        return json.loads(json.dumps(literal, allow_nan=False))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def schema_types(schema: Any) -> tuple[str, ...]:
    """The JSON types a schema allows, in its order (`type`, a list of them, `anyOf`/`oneOf`, `nullable`): the rule
    transformers' `ResponseParser` types arguments by (a private function there; tests/reply pin the parity)."""
    if not isinstance(schema, dict):
        return ()
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else [name for name in declared or () if isinstance(name, str)]
    for union in ("anyOf", "oneOf"):
        for choice in schema.get(union) or ():
            types.extend(schema_types(choice))
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    return tuple(types)


def coerce(raw: str, types: tuple[str, ...]) -> Any:
    """`raw` as the first of `types` it reads as, else as it is (strings, unknown types, failed reads): transformers'
    rule, written here (a private function there; tests/reply pin the parity), except that JSON nested too deep for
    the decoder is a failed read, not an error."""
    for name in types:
        try:
            if name == "integer":
                return _integer(raw)
            if name == "number":
                number = float(raw)
                if not math.isfinite(number):
                    continue
                return int(number) if number.is_integer() and "." not in raw else number
            if name == "boolean" and raw.strip().lower() in ("true", "1", "false", "0"):
                return raw.strip().lower() in ("true", "1")
            if name == "null" and raw.strip() in ("null", "None"):
                return None
            if name in ("object", "array"):
                decoded = json.loads(raw)
                if isinstance(decoded, dict if name == "object" else list):
                    return decoded
        except (ValueError, RecursionError):  # transformers' rule lets a JSON text nested too deep raise
            continue
    return raw


def _integer(raw: str) -> int:
    """A whole number, written as one or as a float with no fraction (`3.0`); ValueError otherwise."""
    try:
        return int(raw)
    except ValueError:
        number = float(raw)
        if not number.is_integer():
            raise
        return int(number)
