"""A grammar that keeps a model to its own template's call format: `tool_choice` and `response_format` as GBNF for
llama.cpp, derived from `Caps` (the call format, the reasoning markers) and the request's tools.

Pure: Caps, tools and the request's choice in, a `Constraint` out (its grammar text and the llama-server `/completion`
fields that carry it). The grammar is the format's own texts as literals around each call, a declared tool's name
where the call writes `${name}`, and arguments in the format's own syntax: a JSON value by chatcaps' own JSON Schema
converter (`reply.json_grammar`), one rule per parameter for the XML-like "parameters" form, Python or the quoted
form's literals. The same text is read by llama.cpp, xgrammar (vLLM) and llguidance. A request this module cannot
express for a template (a format that fits no shape, an arguments form it has no rule for, a schema the converter
cannot read under `required` or a named tool) raises `ConstraintError`, naming why: refused, never silently
unconstrained; what a grammar leaves looser (a keyword it cannot enforce, a tool whose schema it cannot read under
"auto") `Constraint.loosened` names. docs/constrained.md shows grammars.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

from chatcaps.caps import CallFormat, Caps
from chatcaps.errors import InputError
from chatcaps.reply.json_grammar import (
    JsonRules,
    SchemaError,
    avoiding,
    gbnf_class,
    gbnf_text,
    sequence,
    unchecked,
)
from chatcaps.reply.values import schema_types
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
_STRING_FLAG = '="true"'
"""A flag in a parameter's text that the template writes "true" for a string value and "false" for any other, whose
value is then JSON (DeepSeek's DSML `string="true"`): the rule `reply.parameters.parameter_pattern` reads it by."""
_TYPE_NAME = '="string"'
"""A parameter's text that names its value's JSON type, written for a string value (Kimi-K3's `type="string"`):
any other value writes its own type's name."""
_JSON_NAMES = {
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
    "array": "array",
    "object": "object",
}
"""A JSON schema type's JSON value type name (an integer is a JSON number)."""
_PYTHON_RULES = {
    "py-string": r""""'" ( [^'\\\x00-\x1f] | "\\" [^\x00-\x1f] )* "'" | """
    r'''"\"" ( [^"\\\x00-\x1f] | "\\" [^\x00-\x1f] )* "\""''',
    "py-number": '"-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?',
    "py-list": '"[" ( py-value ( ", " py-value )* )? "]"',
    "py-dict": '"{" ( py-string ": " py-value ( ", " py-string ": " py-value )* )? "}"',
    "py-value": 'py-string | py-number | "True" | "False" | "None" | py-list | py-dict',
}
"""Python literals as `repr` writes them (what a Jinja template writes for a list or dict value it prints): a string
in single quotes (double where it holds a single quote), `True`/`False`/`None`, `, ` and `: ` between items."""
_PYTHON_SPELLINGS = {
    "string": "py-string",
    "integer": '"-"? ( "0" | [1-9] [0-9]* )',
    "number": "py-number",
    "boolean": '"True" | "False"',
    "null": '"None"',
    "object": "py-dict",
}
"""A JSON schema type as a Python literal."""
_QUOTED_SPELLINGS = {
    **_PYTHON_SPELLINGS,
    "boolean": '"true" | "false"',
    "null": '"null" | "None"',
    "object": "quoted-dict",
}
"""A JSON schema type in the quoted form (gemma-4's): JSON's `true`/`false`/`null` (or `None`); an object, any
object."""


@dataclass(frozen=True)
class _Spelling:
    """How a literal syntax other than JSON writes a value (Python's `repr`; the quoted form), for `_spelled`."""

    anything: str
    """The rule for any value, where the schema says no more."""
    separator: str
    """Between a list's items and an object's pairs (a GBNF literal)."""
    key: Callable[[str], str]
    """An object's key as written, with what follows it."""
    string: Callable[[Any], list[str]]
    """A string value's branches for its schema."""
    scalars: Mapping[str, str]
    """Any other type's rule."""


def _python_strings(spec: Any) -> list[str]:
    """A Python string: one of its enum's values where the schema has one."""
    enum = spec.get("enum")
    return [_literal(repr(item)) for item in enum if isinstance(item, str)] if isinstance(enum, list) else ["py-string"]


def _quoted_strings(spec: Any, quote: str) -> list[str]:
    """A string in the quoted form: one of its enum's values (or its const) where the schema has one."""
    values = [spec["const"]] if "const" in spec else spec.get("enum")
    texts = [value for value in values if isinstance(value, str)] if isinstance(values, list) else []
    return [_literal(quote + text + quote) for text in texts] or [f"{_literal(quote)} quoted-text {_literal(quote)}"]


_PYTHON = _Spelling("py-value", '", "', lambda key: repr(key) + ": ", _python_strings, _PYTHON_SPELLINGS)
"""Python literals, as `repr` writes them."""
_KEYWORD_SEPARATOR = '"," " "?'
"""Between keyword arguments of a Python call: a comma, and a space where the template writes one."""


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
    loosened: tuple[str, ...] = ()
    """What the grammar does not enforce, each `where: keyword at path` (`reply.json_grammar`), or a tool left free
    (its schema unreadable, under "auto"): the report's `grammar_loosened`."""

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
    caps_key: bytes | None = None,
) -> Constraint | None:
    """The constraint a request asks for, or None where it asks for none (`tool_choice` "auto" or absent with no
    tools, a text `response_format`; "auto" with tools whose format has no rules is left free). `prompt` is the
    rendered prompt: where it opens a reasoning block, the reply starts inside it; where it ends with the start of
    the calls' opening text, the calls go on from there. With
    `response_format` and "auto" with tools, the answer is the JSON or the calls. A tool with `strict: true` gets no
    object key beyond its schema's properties. `caps_key`: the Caps' JSON where the caller keeps it
    (`ChatTemplate.caps_key`), so that finding a grammar built before does not serialise them again. Raises
    `ConstraintError` where the request's constraint cannot be expressed."""

    def build(tools_key: tuple[ToolKey, ...], kind: GrammarKind, answer: str | None = None) -> Constraint:
        """The grammar, where the request asks for one: how the prompt left the reply is read only then."""
        written = "" if kind == "json_schema" else _written(caps, prompt)
        key = caps.to_json() if caps_key is None else caps_key
        return _built(key, tools_key, kind, parallel, answer, _opened(caps, prompt), written)

    schema = _answer_schema(response_format)
    declared = _functions(tools)
    choice = "auto" if tool_choice is None else tool_choice
    if isinstance(choice, Mapping):
        name = _named(choice)
        chosen = [tool for tool in declared if tool["name"] == name]
        if not chosen:
            raise ConstraintError(f"tool_choice names {name!r}, which is not among the tools", field="tool_choice")
        return build(_key(chosen), "named")
    if choice not in ("auto", "none", "required"):
        raise ConstraintError(f"tool_choice {choice!r} is not auto, none, required or a function", field="tool_choice")
    if choice == "required" and not declared:
        raise ConstraintError('tool_choice "required" without tools', field="tool_choice")
    if choice == "required":
        return build(_key(declared), "required")
    answer = None if schema is None else json.dumps(schema)
    if choice == "auto" and declared and caps.tools.call_format is not None and schema is None:
        try:
            return build(_key(declared), "lazy")
        except ConstraintError:  # "auto" asks for nothing: a format without rules is left unconstrained
            return None
    if choice == "none" and declared:
        if caps.tools.call_format is None:
            raise ConstraintError(
                'tool_choice "none": the template writes calls in no format found', field="tool_choice"
            )
        return build((), "none", answer)
    if answer is not None:
        return build(_key(declared) if choice == "auto" else (), "json_schema", answer)
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


ToolKey = tuple[str, str, bool]
"""A tool as the grammar reads it: its name, its parameters' schema as JSON (the property order kept: the grammar
keeps it), whether it is `strict`."""


def _key(functions: Sequence[Mapping[str, Any]]) -> tuple[ToolKey, ...]:
    """The tools as a hashable key (`ToolKey`); the grammar is cached per tools list."""
    found = []
    for function in functions:
        parameters = function.get("parameters")
        schema = {"type": "object"} if parameters is None else parameters
        found.append((str(function["name"]), json.dumps(schema), function.get("strict") is True))
    return tuple(found)


def _opened(caps: Caps, prompt: str) -> Opened:
    """Where the prompt leaves the reasoning: open (the reply starts inside the block: the prompt wrote its start
    marker, or the block has none, its start being the generation prompt's own words, as Apriel's "Here are my
    reasoning steps:"), closed (the prompt wrote the end marker: no reasoning), or free (the reply may open a
    block)."""
    start, end = caps.reasoning.start_marker, caps.reasoning.end_marker
    text = prompt.rstrip()
    if not end or caps.reasoning.format == "none" or (text and text.endswith(end.strip())):
        return "closed"
    return "open" if not start or (text and text.endswith(start.strip())) else "free"


def _written(caps: Caps, text: str) -> str:
    """The start of the calls' opening text (`_lead`) that `text` (the prompt, or what the model writes before the
    calls) ends with: the calls then go on from there (functionary's generation prompt ends with `>>>`, its calls'
    opening; gpt-oss's with `<|start|>assistant`, each call's own message header). Only a start that ends where the
    opening's text breaks counts: at its end, before whitespace, or after a marker."""
    calls = caps.tools.call_format
    lead = _lead(calls) if calls is not None else ""
    for size in range(len(lead), 0, -1):
        start = lead[:size]
        if text.endswith(start) and (
            size == len(lead) or lead[size].isspace() or re.search(f"(?:{_TAG.pattern})$", start)
        ):
            return start
    return ""


@lru_cache(maxsize=256)
def _built(
    caps: bytes,
    tools: tuple[ToolKey, ...],
    kind: GrammarKind,
    parallel: bool,
    answer: str | None,
    opened: Opened,
    written: str,
) -> Constraint:
    """The constraint, built once per template (its Caps' JSON), tools list and choice (building costs milliseconds:
    the JSON schema conversion)."""
    return _Builder(Caps.from_json(caps), opened, written, kind).build(tools, kind, parallel, answer)


class _Builder:
    """The rules of one grammar, named as GBNF wants them (letters, digits and `-`)."""

    def __init__(self, caps: Caps, opened: Opened, written: str, kind: GrammarKind) -> None:
        self.caps = caps
        self.kind = kind
        self.opened = opened
        self.written = written
        """The start of the calls' opening text that the prompt wrote (`_written`)."""
        self.rules: dict[str, str] = {WS: _WS_RULE}
        calls = caps.tools.call_format
        self.json = JsonRules(stops=_stops(calls) if calls is not None else ())
        """The JSON schemas' rules (each schema's primitives are the same rules) and what they leave looser."""
        self.root: Any = {}
        """The schema of the tool whose parameters are being written, which their `$ref`s point into."""
        self.label = ""
        self.path = "#"
        """Where in `root` the value being written is (a JSON pointer: `loosened` names it)."""

    def build(self, tools: tuple[ToolKey, ...], kind: GrammarKind, parallel: bool, answer: str | None) -> Constraint:
        constraint = self._build(tools, kind, parallel, answer)
        return replace(constraint, loosened=tuple(self.json.loosened))

    def _build(self, tools: tuple[ToolKey, ...], kind: GrammarKind, parallel: bool, answer: str | None) -> Constraint:
        calls = self.caps.tools.call_format
        if kind == "json_schema" or kind == "none":
            body = self._answer(json.loads(answer)) if answer is not None else None
            if kind == "json_schema" and tools and calls is not None and calls.shape is not None:
                body = f"{body} | {self._calls(calls, tools, parallel)}"
            if kind != "none":
                return Constraint(kind, self._grammar(self._reasoned(lambda _: f"{WS} ( {body} )")))
            assert calls is not None

            def banned(text: str) -> str:
                written = _written(self.caps, text)
                prose = self._prose(calls, written)
                layout = "" if written else f"{WS} "  # the text goes on from what was written
                return f"{layout}( {f'{body} | {prose}' if body else prose} )"

            return Constraint(kind, self._grammar(self._reasoned(banned)))
        if calls is None or calls.shape is None:
            raise ConstraintError(
                "the template's tool calls fit no format chatcaps can constrain (docs/reply.md)", field="tool_choice"
            )
        rule = self._calls(calls, tools, parallel)
        opener = _opener(calls)
        if kind == "lazy" and not self.written:
            return Constraint(kind, self._grammar(rule), (opener,), _preserved(calls, opener))
        if kind == "lazy":  # the prompt wrote the opener, which can no longer trigger: the same, from the start

            def either(text: str) -> str:
                written = _written(self.caps, text)
                answer = f"{self._prose(calls, written)} ( {WS} {rule} )?"
                if not written:
                    return f"{WS} ( {answer} )"
                return f"( {answer} | {self._calls(calls, tools, parallel, written)} )"

            return Constraint(kind, self._grammar(self._reasoned(either)), (), _preserved(calls, opener))

        def after(text: str) -> str:
            written = _written(self.caps, text)
            return self._calls(calls, tools, parallel, written) if written else f"{WS} {rule}"

        return Constraint(kind, self._grammar(self._reasoned(after)), (), _preserved(calls, opener))

    def _grammar(self, root: str) -> str:
        self.rules["root"] = root + self._closing()
        rules = [f"{name} ::= {body}" for name, body in self.rules.items()]
        rules += self.json.lines()
        return "\n".join(rules) + "\n"

    def _closing(self) -> str:
        """The end of turn's text before its last marker, which the model writes as its stop token: optional after
        the answer or the calls, from any of its markers on (a turn writes the part its own parts close: Kimi-K3
        closes a turn of calls with `<|sep|><|close|>message<|sep|>`, then `<|end_of_msg|>`)."""
        end = self.caps.end_of_turn or ""
        tags = list(_TAG.finditer(end))
        closings = dict.fromkeys(end[tag.start() : tags[-1].start()] for tag in tags[:-1])
        return f" ( {' | '.join(_literal(text) for text in closings)} )?" if closings else ""

    def _reasoned(self, body: Callable[[str], str]) -> str:
        """The body after the reasoning block where the template has one (required where the prompt opened it,
        optional otherwise); nothing after the body, where the model's end of turn is all that may come. `body` is
        given the text right before it: the prompt's start of the calls' opening (`_written`), or the block's end
        marker, followed, where each channel is a message of its own, by the generation prompt that opens the next
        message (gpt-oss's `<|end|>` then `<|start|>assistant`, which its calls go on from)."""
        start, end = self.caps.reasoning.start_marker, self.caps.reasoning.end_marker
        if self.opened == "closed" or not end:
            return body(self.written)
        after = end + (self.caps.generation_prompt if self.caps.reasoning.channel_style else "")
        thought = f"{self._until('thought', end)} {_literal(after)}"
        if self.opened == "open" or not start:
            return f"{thought} {body(after)}"
        later, first = body(after), body(self.written)
        if later == first:
            return f"{WS} ( {_literal(start)} {thought} )? {first}"
        return f"{WS} ( {_literal(start)} {thought} {later} | {first} )"

    def _until(self, name: str, *markers: str) -> str:
        """A rule for text that holds none of `markers`."""
        return avoiding(self.rules, name, markers, _literal)

    def _prose(self, calls: CallFormat, written: str) -> str:
        """A rule for text that does not go on into a call: without the calls' opener, and where `written` (the
        start of their opening text) came right before it, not starting with the rest of the opening, or, where it
        is the whole opening, after an answer's header (the model names the recipient there: functionary's
        `all\\n`; any text where the template has none)."""
        free = self._until("free", _opener(calls))
        rest = _lead(calls)[len(written) :]
        headers = self.caps.reasoning.content_headers
        if written and rest:
            return self._unlike(rest, free)
        if written and headers:
            return f"( {' | '.join(_literal(header) for header in headers)} ) {free}"
        return free

    def _unlike(self, text: str, then: str) -> str:
        """A rule for `then` after text that does not start with `text` (where what came before already wrote the
        start of the calls' opening text: its rest must not follow)."""
        branches = [
            f"{_literal(text[:at])} {_not_char(char)}" if at else _not_char(char) for at, char in enumerate(text)
        ]
        prefixes = [_literal(text[:at]) for at in range(1, len(text))]
        name = f"{then}-after"
        self.rules[name] = f"( {' | '.join(branches)} ) {then} | " + " | ".join([*prefixes, '""'])
        return name

    def _calls(self, calls: CallFormat, tools: tuple[ToolKey, ...], parallel: bool, written: str = "") -> str:
        """The rule for a turn's calls, less `written`, the start of their opening text that was written before them
        (the list's opener, else the first call's)."""
        if "call" not in self.rules:
            self.rules["call"] = " | ".join(self._call(calls, at, tool) for at, tool in enumerate(tools))
        begin, end = calls.begin.strip(), calls.end.strip()
        first = "call"
        if written and not begin:
            first = f"call-after-{len(written)}"
            self.rules[first] = " | ".join(self._call(calls, at, tool, written) for at, tool in enumerate(tools))
        more = ""
        if parallel and calls.separator is not None:
            separator = calls.separator.strip()
            more = f"( {WS} {_literal(separator)} {WS} call )*" if separator else f"( {WS} call )*"
        rest = begin[len(written) :]
        # the layout around the calls is the root's; after the opener, the template's own
        opening = [*([_literal(rest)] if rest else []), WS] if begin else []
        closing = [WS, _literal(end)] if end else []
        name = f"calls-after-{len(written)}" if written else "calls"
        self.rules[name] = " ".join([*opening, first, *([more] if more else []), *closing])
        return name

    def _call(self, calls: CallFormat, at: int, tool: ToolKey, written: str = "") -> str:
        """One call of `tool`: its arguments by its schema; where the converter cannot read that, a 400 naming the
        tool and the keyword for `required` or a named tool, and for "auto" the tool's declared parameters with any
        value (`free`)."""
        name, schema, strict = tool[0], json.loads(tool[1]), tool[2]
        try:
            return self._call_of(calls, at, name, schema, strict, written)
        except SchemaError as error:
            if self.kind in ("required", "named"):
                raise ConstraintError(
                    f"tool {name!r}: its parameters' JSON schema cannot be constrained ({error})", field="tools"
                ) from error
            self.json.note(f"{name}: unconstrained ({error})")
            return self._call_of(calls, at, name, _any_arguments(schema), False, written)

    def _call_of(self, calls: CallFormat, at: int, name: str, schema: Any, strict: bool, written: str = "") -> str:
        text = calls.call.strip()[len(written) :]
        parts, last = [], 0
        for match in PLACEHOLDER.finditer(text):
            if match.start() > last:
                parts.append(_literal(text[last : match.start()]))
            hole = match.group(1)
            if hole == "name":
                parts.append(_literal(name))
            elif hole == "arguments":
                parts.append(self._arguments(calls, at, schema, name, strict))
            elif hole == "index":
                parts.append("[0-9]{1,3}")
            else:
                parts.append("[A-Za-z0-9_]{1,40}")
            last = match.end()
        if last < len(text):
            parts.append(_literal(text[last:]))
        rule = f"call-{at}-after-{len(written)}" if written else f"call-{at}"
        self.rules[rule] = " ".join(parts)
        return rule

    def _arguments(self, calls: CallFormat, at: int, schema: Any, tool: str, strict: bool) -> str:
        if calls.arguments == "json":
            return self.json.rule(schema, f"args-{at}", strict=strict, label=f"{tool}: ")
        self.root, self.label = schema, f"{tool}: "
        if calls.arguments == "parameters" and calls.parameter:
            return self._parameters(calls.parameter, at, self.json.flat(schema))
        if calls.arguments == "python":
            return self._keywords(at, self.json.flat(schema))
        head, _, quote = (calls.parameter or "").partition("${value}")
        if calls.arguments == "quoted" and quote and head.startswith("${key}") and head.endswith(quote):
            self.path = "#"
            self._unchecked(schema)
            return self._quoted(schema, f"args-{at}", quote, head[len("${key}") : -len(quote)])
        raise ConstraintError(
            f"the template writes tool arguments in the {calls.arguments!r} form, which chatcaps cannot constrain yet",
            field="tool_choice",
        )

    def _answer(self, schema: Any) -> str:
        """The rule for a JSON answer fitting `schema` (`response_format`)."""
        try:
            return self.json.rule(schema, "answer", label="response_format: ")
        except SchemaError as error:
            raise ConstraintError(
                f"response_format's JSON schema cannot be constrained ({error})", field="response_format"
            ) from error

    def _json(self, schema: Any, name: str) -> str:
        """A value of one parameter (`schema`, a part of the tool's schema `self.root`) as JSON."""
        return self.json.rule(schema, name, root=self.root, path=self.path, label=self.label)

    def _unchecked(self, spec: Any) -> None:
        """Report what a literal syntax other than JSON does not check of `spec` (`json_grammar.unchecked`)."""
        for note in unchecked(spec, self.path):
            self.json.note(f"{self.label}{note} (not as JSON)")

    def _parameters(self, parameter: str, at: int, schema: Mapping[str, Any]) -> str:
        """One rule per parameter, in the schema's order, the required ones required: a string's value is text up to
        the parameter's closing text, any other value JSON by its schema, or the Python literal a Jinja template
        writes for it (`True`, `None`, `['a', 1]`). Where the parameter's text flags a string value
        (`_STRING_FLAG`) or names its type (`_TYPE_NAME`), any other value writes its own flag or type name."""
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        head, _, tail = parameter.partition("${value}")
        parts = []
        for number, (key, spec) in enumerate(properties.items()):
            rule = f"param-{at}-{number}"
            self.path = f"#/properties/{_pointer(key)}"
            opening, closing = head.replace("${key}", key).lstrip(), tail.replace("${key}", key)
            types = schema_types(spec) or ("string",)
            others = [kind for kind in types if kind != "string"]
            values = [f"{_literal(opening)} {self._text(spec, closing, f'{rule}-text')}"] if "string" in types else []
            if others:
                openings = list(dict.fromkeys(_typed(opening, kind) for kind in others))
                spelled = " | ".join(_literal(text) for text in openings)
                value = self._value(spec, f"{rule}-value", others)
                values.append(f"{f'( {spelled} )' if len(openings) > 1 else spelled} {value}")
            body = values[0] if len(values) == 1 else f"( {' | '.join(values)} )"
            self.rules[rule] = f"{WS} {body} {_literal(closing)}"
            parts.append(rule if key in required else f"{rule}?")
        return "( " + " ".join(parts) + " )" if parts else '""'

    def _text(self, spec: Any, closing: str, name: str) -> str:
        """A string parameter's raw text: one of its `enum` (or its `const`), else any text up to `closing`, the
        string's other keywords reported unchecked."""
        values = [spec["const"]] if isinstance(spec, Mapping) and "const" in spec else None
        if values is None and isinstance(spec, Mapping) and isinstance(spec.get("enum"), list):
            values = spec["enum"]
        texts = [value for value in values or () if isinstance(value, str) and closing not in value]
        if texts:
            return f"( {' | '.join(_literal(text) for text in texts)} )"
        self._unchecked(
            {key: value for key, value in spec.items() if key in _TEXT_WORDS} if isinstance(spec, Mapping) else {}
        )
        stops = self.json.stops  # a closing text that holds a marker is kept out with it (`</parameter>`)
        return self._until(name, *([] if any(stop in closing for stop in stops) else [closing]), *stops)

    def _value(self, spec: Mapping[str, Any], name: str, types: Sequence[str]) -> str:
        """A value that is not text: JSON by its schema, or as a Jinja template prints it (`_PYTHON_WORDS`, and a
        Python literal for a list or dict)."""
        spelled = [_literal(word) for kind, word in _PYTHON_WORDS if kind in types]
        if {"array", "object"} & set(types):
            self._unchecked(spec)
            spelled.append(self._python(spec, f"{name}-py"))
        value = " | ".join([self._json(spec, name), *spelled])
        return f"( {value} )" if spelled else value

    def _keywords(self, at: int, schema: Mapping[str, Any]) -> str:
        """Python keyword arguments (`city='Paris', days=3`), in the schema's order, the required ones required,
        each value JSON by its schema or a Python literal fitting it (a template prints either: LFM2.5 a string as
        `'Paris'` and a dict as JSON, MiniCPM3 all as JSON)."""
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        items = []
        for number, (key, spec) in enumerate(properties.items()):
            rule = f"kwarg-{at}-{number}"
            self.path = f"#/properties/{_pointer(key)}"
            self._unchecked(spec)
            value = f"( {self._json(spec, f'{rule}-value')} | {self._python(spec, f'{rule}-py')} )"
            self.rules[rule] = f"{_literal(key + '=')} {value}"
            items.append((rule, key in required))
        return sequence(self.rules, f"kwargs-{at}", items, _KEYWORD_SEPARATOR)

    def _quoted(self, spec: Any, name: str, quote: str, colon: str) -> str:
        """A value in a call syntax with a quoting token of its own (gemma-4's `{city:<|"|>Paris<|"|>,days:3}`, read
        by `vocab.read_quoted`), fitting the JSON schema `spec`: a string between two `quote` tokens, an object of
        unquoted keys (`colon` after each) in braces, a list in brackets, commas between items, a number, `true`,
        `false`, `null` or `None`. An object's declared keys in any order (gemma-4's template writes them sorted),
        the required ones not enforced; any value where the schema says no more."""
        self._primitives()
        if "quoted-text" not in self.rules:
            text = self._until("quoted-text", quote, *(stop for stop in self.json.stops if stop != quote))
            value = f'{_literal(quote)} {text} {_literal(quote)} | py-number | "true" | "false" | "null" | "None"'
            firsts = dict.fromkeys(stop[0] for stop in self.json.stops)  # a key is no start of a marker either
            item = f"{_not_char(*colon, *'{}[],', *firsts)}+ {_literal(colon)} quoted-value"
            self.rules["quoted-value"] = f'{value} | "[" ( quoted-value ( "," quoted-value )* )? "]" | quoted-dict'
            self.rules["quoted-dict"] = f'"{{" ( {item} ( "," {item} )* )? "}}"'
        spelling = _Spelling(
            anything="quoted-value",
            separator='","',
            key=lambda key: key + colon,
            string=lambda spec: _quoted_strings(spec, quote),
            scalars=_QUOTED_SPELLINGS,
        )
        return self._spelled(spec, name, spelling)

    def _primitives(self) -> None:
        """The Python literal rules every `_python` rule may refer to (`_PYTHON_RULES`); a string's text holds none
        of the call format's markers (`_stops`), as a JSON string's."""
        for rule, body in _PYTHON_RULES.items():
            self.rules.setdefault(rule, body)
        stops = self.json.stops
        if stops and "py-text-1" not in self.rules:
            # a backslash keeps the character after it as it is (`\\<` is two characters): not a marker's first
            firsts = [(0, 0x1F), *((ord(stop[0]), ord(stop[0])) for stop in stops)]
            escape = f'"\\\\" {gbnf_class(firsts, negated=True)}'
            for number, quote in enumerate("'\"", 1):
                avoiding(self.rules, f"py-text-{number}", stops, plain=quote + "\\" + _CONTROLS, escape=escape)
            self.rules["py-string"] = '"\'" py-text-1 "\'" | "\\"" py-text-2 "\\""'

    def _python(self, spec: Any, name: str) -> str:
        """A Python literal fitting the JSON schema `spec` (its types, an array's items, an object's properties, a
        string enum): `py-value` where the schema says no more."""
        self._primitives()
        return self._spelled(spec, name, _PYTHON)

    def _spelled(self, spec: Any, name: str, spelling: _Spelling, depth: int = 0) -> str:
        """A value fitting the JSON schema `spec` in a literal syntax other than JSON (`spelling`): its types, an
        array's items, an object's declared properties (in any order), `spelling.anything` where it says no more
        (or past a few levels of `$ref`s, which may recur)."""
        if isinstance(spec, Mapping) and ("$ref" in spec or "allOf" in spec):
            try:
                spec = self.json.flat(spec, root=self.root) if depth < 4 else {}
            except SchemaError:
                spec = {}
        branches: list[str] = []
        for kind in dict.fromkeys(schema_types(spec)):
            if kind == "string":
                branches.extend(spelling.string(spec))
            elif kind == "array":
                items = spec.get("items")
                item = (
                    self._spelled(items, f"{name}-item", spelling, depth + 1)
                    if isinstance(items, Mapping)
                    else spelling.anything
                )
                branches.append(f'"[" ( {item} ( {spelling.separator} {item} )* )? "]"')
            elif kind == "object" and isinstance(spec.get("properties"), Mapping) and spec["properties"]:
                pairs = [
                    f"{_literal(spelling.key(key))} {self._spelled(value, f'{name}-{number}', spelling, depth + 1)}"
                    for number, (key, value) in enumerate(spec["properties"].items())
                ]
                self.rules[f"{name}-pair"] = " | ".join(pairs)
                branches.append(f'"{{" ( {name}-pair ( {spelling.separator} {name}-pair )* )? "}}"')
            else:
                branches.append(spelling.scalars.get(kind, spelling.anything))
        if not branches:
            return spelling.anything
        self.rules[name] = " | ".join(branches)
        return name


_TEXT_WORDS = frozenset({"pattern", "format", "minLength", "maxLength"})
"""What a string parameter's raw text does not check."""


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _any_arguments(schema: Any) -> dict[str, Any]:
    """Arguments for a tool whose schema the converter cannot read: its declared parameters, any values."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return {"type": "object"}
    return {"type": "object", "properties": {str(key): {} for key in properties}}


_CONTROLS = "".join(map(chr, range(0x20)))


def _stops(calls: CallFormat) -> tuple[str, ...]:
    """The markers in the call format's texts (`<tool_call>`, `</function>`, `</parameter>`, `[TOOL_CALLS]`,
    `<parameter=`): a reader may take one inside an argument for the end of the call or of a parameter, so no string
    the grammar writes inside a call holds one."""
    parts = (calls.begin, calls.call, calls.separator or "", calls.end, calls.parameter or "")
    texts = " ".join(PLACEHOLDER.sub(" ", text) for text in parts)
    # and an opening cut by its name (`<function=`, `<parameter name="`), which a reader splits on too
    heads = [_TAG.split(PLACEHOLDER.split(text)[0])[-1].strip() for text in (calls.call, calls.parameter or "")]
    cut = [head for head in heads if head and head[0] in "<["]
    return tuple(dict.fromkeys([*_TAG.findall(texts), *cut]))


def _lead(calls: CallFormat) -> str:
    """The literal text every turn of calls starts with: the list's opener, else the call's text before its first
    placeholder."""
    call = calls.call.strip()
    return calls.begin.strip() or call[: call.find("${")]


def _opener(calls: CallFormat) -> str:
    """`_lead`, cut at the first whitespace after a marker (what the lazy grammar is triggered on)."""
    head = _lead(calls)
    return head.split()[0] if head.split() else head


def _typed(opening: str, kind: str) -> str:
    """A parameter's opening text for a value of the JSON schema type `kind`, not a string: its string flag or its
    type name (`_STRING_FLAG`, `_TYPE_NAME`) as written for that type."""
    if _STRING_FLAG in opening:
        return opening.replace(_STRING_FLAG, '="false"', 1)
    if _TYPE_NAME in opening:
        return opening.replace(_TYPE_NAME, f'="{_JSON_NAMES.get(kind, kind)}"', 1)
    return opening


def _preserved(calls: CallFormat, opener: str) -> tuple[str, ...]:
    texts = " ".join((calls.begin, calls.call, calls.separator or "", calls.end))
    return tuple(dict.fromkeys([opener, *(tag for tag in _TAG.findall(texts) if "${" not in tag)]))


def _literal(text: str) -> str:
    """GBNF string literals for `text`, each marker-like tag a literal of its own (a backend whose vocabulary has it
    as one special token can then allow that token for it: `serve/local.py`); backslash, quote and control
    characters escaped, other text as it is."""
    pieces = [piece for piece in re.split(f"({_TAG.pattern})", text) if piece] or [""]
    return " ".join(f'"{gbnf_text(piece)}"' for piece in pieces)


def _not_char(*chars: str) -> str:
    """A GBNF class of every character but `chars`, each written as an escape (`]`, `^`, `-` mean things in a
    class)."""
    escaped = [
        f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
        for code in map(ord, chars)
    ]
    return f"[^{''.join(escaped)}]"
