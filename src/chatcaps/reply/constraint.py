"""A grammar that keeps a model to its own template's call format: `tool_choice` and `response_format` as GBNF for
llama.cpp, derived from `Caps` (the call format, the reasoning markers) and the request's tools.

Pure: Caps, tools and the request's choice in, a `Constraint` out (its grammar text and the llama-server `/completion`
fields that carry it). The grammar is the format's own texts as literals around each call, a declared tool's name
where the call writes `${name}`, and arguments in the format's own syntax: a JSON object by llama.cpp's own JSON
schema converter (shipped with llama-cpp-python), or one rule per parameter for the XML-like "parameters" form. A
request this module cannot express for a template (a format that fits no shape, an arguments form it has no rule
for) raises `ConstraintError`, naming why: refused, never silently unconstrained. docs/constrained.md shows grammars.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from chatcaps.caps import CallFormat, Caps
from chatcaps.errors import InputError
from chatcaps.reply.calls import schema_types
from chatcaps.vocab import PLACEHOLDER

Opened = Literal["open", "closed", "free"]
GrammarKind = Literal["required", "named", "lazy", "none", "json_schema"]
"""What the grammar enforces: a call (any declared tool / the named one), free text until the call opener and calls
after it, text without the call opener, a JSON answer."""
WORD_TRIGGER = 1
"""llama.cpp's `COMMON_GRAMMAR_TRIGGER_TYPE_WORD` (common/common.h): the lazy grammar starts where the word is
generated, the word included."""
WS = "ws"
_WS_RULE = "[ \\t\\n]{0,8}"
"""Layout between the parts the template writes (its own whitespace around the opener and closer varies): bounded,
so that a model cannot loop on it."""
_TAG = re.compile(r"<[^<>\s]+>|\[[A-Z_]+\]")
"""A marker-like text in the format (`<tool_call>`, `[TOOL_CALLS]`): kept whole by llama-server's tokenizer where it
is one token (`preserved_tokens`)."""


_PYTHON_WORDS = (("boolean", "True"), ("boolean", "False"), ("null", "None"))
"""How a Jinja template writes a boolean or null parameter value (Python's spelling) besides JSON's."""


class ConstraintError(InputError):
    """The request asks for a constraint this template's format or this backend cannot apply; `field` names the
    request field (`tool_choice`, `response_format`)."""


@dataclass(frozen=True)
class Constraint:
    """A grammar and how llama-server applies it."""

    kind: GrammarKind
    grammar: str
    triggers: tuple[str, ...] = ()
    """Words that start a lazy grammar; empty where the grammar holds from the first token."""
    preserved_tokens: tuple[str, ...] = ()

    def completion_fields(self) -> dict[str, Any]:
        """llama-server `/completion` fields (tools/server/README.md: `grammar`, `grammar_lazy`, `grammar_triggers`,
        `preserved_tokens`)."""
        fields: dict[str, Any] = {"grammar": self.grammar}
        if self.triggers:
            fields |= {
                "grammar_lazy": True,
                "grammar_triggers": [{"type": WORD_TRIGGER, "value": word} for word in self.triggers],
            }
        if self.preserved_tokens:
            fields["preserved_tokens"] = list(self.preserved_tokens)
        return fields


def constraint(
    caps: Caps,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: Any,
    *,
    parallel: bool = True,
    response_format: Mapping[str, Any] | None = None,
    prompt: str = "",
) -> Constraint | None:
    """The constraint a request asks for, or None where it asks for none (`tool_choice` "auto" or absent with no
    tools, a text `response_format`; "auto" with tools whose format has no rules, or without llama-cpp-python, is
    left free). `prompt` is the rendered prompt: where it opens a reasoning block, the reply starts inside it. With
    `response_format` and "auto" with tools, the answer is the JSON or the calls. Raises `ConstraintError` where the
    request's constraint cannot be expressed."""
    schema = _answer_schema(response_format)
    declared = _functions(tools)
    choice = "auto" if tool_choice is None else tool_choice
    if isinstance(choice, Mapping):
        name = _named(choice)
        chosen = [tool for tool in declared if tool["name"] == name]
        if not chosen:
            raise ConstraintError(f"tool_choice names {name!r}, which is not among the tools", field="tool_choice")
        return _cached(caps, _key(chosen), "named", parallel, None, _opened(caps, prompt))
    if choice not in ("auto", "none", "required"):
        raise ConstraintError(f"tool_choice {choice!r} is not auto, none, required or a function", field="tool_choice")
    if choice == "required" and not declared:
        raise ConstraintError('tool_choice "required" without tools', field="tool_choice")
    if choice == "required":
        return _cached(caps, _key(declared), "required", parallel, None, _opened(caps, prompt))
    answer = None if schema is None else json.dumps(schema)
    if choice == "auto" and declared and caps.tools.call_format is not None and schema is None:
        try:
            return _cached(caps, _key(declared), "lazy", parallel, None, _opened(caps, prompt))
        except ConstraintError:  # "auto" asks for nothing: a format without rules is left unconstrained
            return None
    if choice == "none" and declared:
        if caps.tools.call_format is None:
            raise ConstraintError(
                'tool_choice "none": the template writes calls in no format found', field="tool_choice"
            )
        return _cached(caps, (), "none", parallel, answer, _opened(caps, prompt))
    if answer is not None:
        return _cached(
            caps, _key(declared) if choice == "auto" else (), "json_schema", parallel, answer, _opened(caps, prompt)
        )
    return None


def _answer_schema(response_format: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise ConstraintError("response_format.json_schema.schema must be an object", field="response_format")
        return schema
    raise ConstraintError(
        f"response_format type {kind!r} is not text, json_object or json_schema", field="response_format"
    )


def _functions(tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    found = []
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            found.append(function)
    return found


def _named(choice: Mapping[str, Any]) -> str:
    function = choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise ConstraintError(
            'tool_choice must be {"type": "function", "function": {"name": ...}}', field="tool_choice"
        )
    return name


def _key(functions: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The tools as a hashable key (name, parameters schema as JSON, its property order kept: the grammar keeps
    it); the grammar is cached per tools list."""
    return tuple((str(f["name"]), json.dumps(f.get("parameters") or {})) for f in functions)


def _opened(caps: Caps, prompt: str) -> Opened:
    """Where the prompt leaves the reasoning: open (the reply starts inside the block), closed (the prompt wrote the
    end marker: no reasoning), or free (the reply may open a block)."""
    start, end = caps.reasoning.start_marker, caps.reasoning.end_marker
    text = prompt.rstrip()
    if not (start and end) or caps.reasoning.format == "none" or (text and text.endswith(end.strip())):
        return "closed"
    return "open" if text and text.endswith(start.strip()) else "free"


def _cached(
    caps: Caps,
    tools: tuple[tuple[str, str], ...],
    kind: GrammarKind,
    parallel: bool,
    answer: str | None,
    opened: Opened,
) -> Constraint:
    """The constraint, built once per template, tools list and choice (building costs milliseconds: the JSON schema
    conversion)."""
    return _built(caps.to_json(), tools, kind, parallel, answer, opened)


@lru_cache(maxsize=256)
def _built(
    caps: bytes,
    tools: tuple[tuple[str, str], ...],
    kind: GrammarKind,
    parallel: bool,
    answer: str | None,
    opened: Opened,
) -> Constraint:
    return _Builder(Caps.from_json(caps), opened).build(tools, kind, parallel, answer)


class _Builder:
    """The rules of one grammar, named as GBNF wants them (letters, digits and `-`)."""

    def __init__(self, caps: Caps, opened: Opened) -> None:
        self.caps = caps
        self.opened = opened
        self.rules: dict[str, str] = {WS: _WS_RULE}
        self.converted: dict[str, str] = {}
        """The JSON schema converter's rules, by name (each schema's primitives are the same rules)."""

    def build(
        self, tools: tuple[tuple[str, str], ...], kind: GrammarKind, parallel: bool, answer: str | None
    ) -> Constraint:
        calls = self.caps.tools.call_format
        if kind == "json_schema" or kind == "none":
            body = self._json(json.loads(answer), "answer") if answer is not None else None
            if kind == "json_schema" and tools and calls is not None and calls.shape is not None:
                body = f"{body} | {self._calls(calls, tools, parallel)}"
            if kind == "none":
                assert calls is not None
                free = self._until(_opener(calls), "free")
                body = f"{body} | {free}" if body else free
            return Constraint(kind, self._grammar(self._reasoned(f"( {body} )")))
        if calls is None or calls.shape is None:
            raise ConstraintError(
                "the template's tool calls fit no format chatcaps can constrain (docs/reply.md)", field="tool_choice"
            )
        rule = self._calls(calls, tools, parallel)
        if kind == "lazy":
            opener = _opener(calls)
            return Constraint(kind, self._grammar(rule), (opener,), _preserved(calls, opener))
        return Constraint(kind, self._grammar(self._reasoned(rule)), (), _preserved(calls, _opener(calls)))

    def _grammar(self, root: str) -> str:
        self.rules["root"] = root
        rules = [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join([*rules, *self.converted.values()]) + "\n"

    def _reasoned(self, body: str) -> str:
        """`body` after the reasoning block where the template has one (required where the prompt opened it,
        optional otherwise), with the layout a template writes between them; nothing after the body, where the
        model's end of turn is all that may come."""
        start, end = self.caps.reasoning.start_marker, self.caps.reasoning.end_marker
        if self.opened == "closed" or not (start and end):
            return f"{WS} {body}"
        thought = f"{self._until(end, 'thought')} {_literal(end)}"
        if self.opened == "open":
            return f"{thought} {WS} {body}"
        return f"{WS} ( {_literal(start)} {thought} )? {WS} {body}"

    def _until(self, marker: str, name: str) -> str:
        """A rule for text that does not contain `marker`."""
        branches, prefix = [], ""
        for char in marker:
            branches.append(f"{_literal(prefix)} {_not_char(char)}" if prefix else _not_char(char))
            prefix += char
        self.rules[name] = f"( {' | '.join(branches)} )*"
        return name

    def _calls(self, calls: CallFormat, tools: tuple[tuple[str, str], ...], parallel: bool) -> str:
        names = [self._call(calls, at, name, json.loads(schema)) for at, (name, schema) in enumerate(tools)]
        self.rules["call"] = " | ".join(names)
        begin, end = calls.begin.strip(), calls.end.strip()
        more = ""
        if parallel and calls.separator is not None:
            separator = calls.separator.strip()
            more = f"( {WS} {_literal(separator)} {WS} call )*" if separator else f"( {WS} call )*"
        opening = [_literal(begin), WS] if begin else []  # the layout around the calls is the root's
        closing = [WS, _literal(end)] if end else []
        self.rules["calls"] = " ".join([*opening, "call", *([more] if more else []), *closing])
        return "calls"

    def _call(self, calls: CallFormat, at: int, name: str, schema: Mapping[str, Any]) -> str:
        text = calls.call.strip()
        parts, last = [], 0
        for match in PLACEHOLDER.finditer(text):
            if match.start() > last:
                parts.append(_literal(text[last : match.start()]))
            hole = match.group(1)
            if hole == "name":
                parts.append(_literal(name))
            elif hole == "arguments":
                parts.append(self._arguments(calls, at, schema))
            elif hole == "index":
                parts.append("[0-9]{1,3}")
            else:
                parts.append("[A-Za-z0-9_]{1,40}")
            last = match.end()
        if last < len(text):
            parts.append(_literal(text[last:]))
        self.rules[f"call-{at}"] = " ".join(parts)
        return f"call-{at}"

    def _arguments(self, calls: CallFormat, at: int, schema: Mapping[str, Any]) -> str:
        if calls.arguments == "json":
            return self._json(schema, f"args-{at}")
        if calls.arguments == "parameters" and calls.parameter:
            return self._parameters(calls.parameter, at, schema)
        raise ConstraintError(
            f"the template writes tool arguments in the {calls.arguments!r} form, which chatcaps cannot constrain yet",
            field="tool_choice",
        )

    def _json(self, schema: Mapping[str, Any], name: str) -> str:
        """llama.cpp's converter, keeping the schema's own order of properties (what a template renders and a model
        writes; the converter's default is alphabetical)."""
        try:
            from llama_cpp.llama_grammar import SchemaConverter
        except ImportError as error:
            raise ConstraintError(
                "a JSON schema in a grammar needs llama.cpp's converter: install llama-cpp-python (chatcaps[llamacpp])",
                field="tool_choice",
            ) from error

        order = {key: at for at, key in enumerate(dict.fromkeys(_property_names(schema)))}
        # llama-cpp-python leaves its converter unannotated
        converter = SchemaConverter(prop_order=order, allow_fetch=False, dotall=False, raw_pattern=False)  # type: ignore[no-untyped-call]
        resolved = converter.resolve_refs(json.loads(json.dumps(schema)), name)
        rule = str(converter.visit(resolved, name))  # type: ignore[no-untyped-call]
        grammar: str = converter.format_grammar()  # type: ignore[no-untyped-call]
        for line in grammar.splitlines():
            self.converted.setdefault(line.partition(" ::= ")[0], line)
        return rule

    def _parameters(self, parameter: str, at: int, schema: Mapping[str, Any]) -> str:
        """One rule per parameter, in the schema's order, the required ones required: a string's value is text up to
        the parameter's closing text, any other value JSON by its schema (or Python's spelling of a boolean or null,
        which is what a Jinja template writes)."""
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        head, _, tail = parameter.partition("${value}")
        parts = []
        for number, (key, spec) in enumerate(properties.items()):
            rule = f"param-{at}-{number}"
            opening = head.replace("${key}", key)
            types = schema_types(spec)
            if types in ((), ("string",)):
                value = self._until(tail, f"{rule}-text")
            else:
                spelled = [_literal(word) for kind, word in _PYTHON_WORDS if kind in types]
                value = " | ".join([self._json(spec, f"{rule}-value"), *spelled])
                value = f"( {value} )" if spelled else value
            self.rules[rule] = f"{WS} {_literal(opening.lstrip())} {value} {_literal(tail)}"
            parts.append(rule if key in required else f"{rule}?")
        return "( " + " ".join(parts) + " )" if parts else '""'


def _property_names(schema: Any) -> list[str]:
    """Every property name in `schema`, nested ones too, in the order written."""
    if isinstance(schema, list):
        return [name for item in schema for name in _property_names(item)]
    if not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    own = list(properties) if isinstance(properties, Mapping) else []
    return own + [name for value in schema.values() for name in _property_names(value)]


def _opener(calls: CallFormat) -> str:
    """The literal text every turn of calls starts with: the list's opener and the call's text before its first
    placeholder, cut at the first whitespace after a marker (what the lazy grammar is triggered on)."""
    call = calls.call.strip()
    head = calls.begin.strip() or call[: call.find("${")]
    return head.split()[0] if head.split() else head


def _preserved(calls: CallFormat, opener: str) -> tuple[str, ...]:
    texts = " ".join((calls.begin, calls.call, calls.separator or "", calls.end))
    return tuple(dict.fromkeys([opener, *(tag for tag in _TAG.findall(texts) if "${" not in tag)]))


def _literal(text: str) -> str:
    """GBNF string literals for `text`, each marker-like tag a literal of its own (a backend whose vocabulary has it
    as one special token can then allow that token for it: `serve/local.py`); backslash, quote and control
    characters escaped, other text as it is."""
    pieces = [piece for piece in re.split(f"({_TAG.pattern})", text) if piece] or [""]
    return " ".join(f'"{_escaped(piece)}"' for piece in pieces)


def _escaped(text: str) -> str:
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 else "\\" + c if c in '\\"' else c for c in text)


def _not_char(char: str) -> str:
    """A GBNF class of every character but `char`, written as an escape (`]`, `^`, `-` mean things in a class)."""
    code = ord(char)
    escaped = f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return f"[^{escaped}]"
