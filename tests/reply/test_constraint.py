"""`chatcaps.reply.constraint` on three call formats written out (tests/data/reply/constraint_formats.json: Hermes'
`<tool_call>` JSON with `<think>` reasoning, Qwen3-Coder's XML parameters, Mistral's `[TOOL_CALLS]NAME[ARGS]{...}`
with one call): the exact grammar and llama-server fields for each choice, the grammar cached per tools list, and
the requests it refuses by name. docs/constrained.md shows the same grammars."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from paths import ROOT

from chatcaps.caps import CallFormat, Caps, Reasoning, Tools
from chatcaps.reply.constraint import ConstraintError, constraint
from chatcaps.reply.json_grammar import gbnf_class

DATA: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "reply" / "constraint_formats.json").read_text("utf-8"))
TOOLS = [DATA["tool"]]


def text_rules(name: str, markers: tuple[str, ...], plain: str = "", escape: str = "") -> list[str]:
    """The rules for text that holds none of `markers` (`json_grammar.avoiding`), as written out: a character that
    starts no marker; a chunk (a marker's start, then a character that neither goes on with one nor starts one);
    any starts of markers before a chunk and at the end."""
    firsts = "".join(dict.fromkeys(marker[0] for marker in markers))
    prefixes = list(dict.fromkeys(marker[:size] for marker in markers for size in range(1, len(marker))))

    def spelled(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def char(chars: str) -> str:
        found = gbnf_class([(ord(c), ord(c)) for c in chars + firsts + plain], negated=True)
        return f"( {found} | {escape} )" if escape else found

    def nexts(prefix: str) -> str:
        return "".join(marker[len(prefix)] for marker in markers if marker.startswith(prefix))

    return [
        f"{name}-lead ::= " + " | ".join(spelled(prefix) for prefix in prefixes),
        f"{name}-chunk ::= " + " | ".join(f"{spelled(prefix)} {char(nexts(prefix))}" for prefix in prefixes),
        f"{name} ::= ( {char('')} | {name}-lead* {name}-chunk )* {name}-lead*",
    ]


JSON_PLAIN = '"\\\x7f' + "".join(map(chr, range(0x20)))
HERMES_TEXT = text_rules("json-text", ("<tool_call>", "</tool_call>"), JSON_PLAIN, "json-escape")
"""A JSON string's text inside a Hermes call: JSON's characters, without the format's markers."""
JSON_RULES = [
    'json-space ::= " "?',
    'json-escape ::= "\\\\" ( ["\\\\/bfnrt] | "u" ( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )',
    'json-string ::= "\\"" json-text "\\"" json-space',
    *HERMES_TEXT,
    'json-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) json-space',
]
"""chatcaps' converter's shared rules for the tool's string and integer (`reply.json_grammar.PRIMITIVES`): a JSON
string's characters without raw control characters, JSON's escapes only, and not the call's markers."""
ARGS = [
    'args-0-city-kv ::= "\\"city\\"" json-space ":" json-space json-string',
    'args-0-days-kv ::= "\\"days\\"" json-space ":" json-space json-integer',
    'args-0-props-0 ::= ( "," json-space args-0-days-kv )?',
    'args-0 ::= "{" json-space ( args-0-city-kv args-0-props-0 ) "}" json-space',
]
WS = "ws ::= [ \\t\\n]{0,8}"
THOUGHT = text_rules("thought", ("</think>",))
HERMES_CALL = (
    'call-0 ::= "<tool_call>" "\\x0a{\\"name\\": \\"" "get_weather" "\\", \\"arguments\\": " args-0 "}\\x0a" '
    '"</tool_call>"'
)
CITY_TEXT = text_rules(
    "param-0-0-text", ("<tool_call>", "</function>", "</tool_call>", "</parameter>", "<function=", "<parameter=")
)
"""A string parameter's raw text: none of the parameter's closing text and the call format's markers."""


def caps(name: str) -> Caps:
    spec = DATA["formats"][name]
    call_format = CallFormat(**spec["call_format"])
    tools = Tools(definitions=True, calls=True, call_format=call_format)
    texts = {key: spec[key] for key in ("generation_prompt", "end_of_turn") if key in spec}
    return Caps(template_sha256=name, engine="jinja2", tools=tools, reasoning=Reasoning(**spec["reasoning"]), **texts)


def grammar(*rules: str) -> str:
    return "\n".join(rules) + "\n"


def test_hermes_required() -> None:
    found = constraint(caps("hermes"), TOOLS, "required")
    assert found is not None
    expected = grammar(
        WS,
        HERMES_CALL,
        "call ::= call-0",
        "calls ::= call ( ws call )*",
        *THOUGHT,
        'root ::= ws ( "<think>" thought "</think>" )? ws calls',
        *ARGS,
        *JSON_RULES,
    )
    assert (found.kind, found.grammar, found.completion_fields()) == (
        "required",
        expected,
        {"grammar": expected, "preserved_tokens": ["<tool_call>", "</tool_call>"]},
    )


def test_hermes_auto_is_lazy_on_the_opener() -> None:
    found = constraint(caps("hermes"), TOOLS, "auto")
    assert found is not None
    expected = grammar(
        WS, HERMES_CALL, "call ::= call-0", "calls ::= call ( ws call )*", "root ::= calls", *ARGS, *JSON_RULES
    )
    assert found.completion_fields() == {
        "grammar": expected,
        "grammar_lazy": True,
        "grammar_triggers": [{"type": 1, "value": "<tool_call>"}],
        "preserved_tokens": ["<tool_call>", "</tool_call>"],
    }


def test_qwen3_coder_parameters() -> None:
    found = constraint(caps("qwen3-coder"), TOOLS, "required")
    assert found is not None
    assert found.grammar == grammar(
        WS,
        *CITY_TEXT,
        'param-0-0 ::= ws "<parameter=city>" "\\x0a" param-0-0-text "\\x0a" "</parameter>"',
        'param-0-1 ::= ws "<parameter=days>" "\\x0a" json-integer "\\x0a" "</parameter>"',
        'call-0 ::= "<tool_call>" "\\x0a<function=" "get_weather" ">" ( param-0-0 param-0-1? ) '
        '"\\x0a" "</function>" "\\x0a" "</tool_call>"',
        "call ::= call-0",
        "calls ::= call ( ws call )*",
        "root ::= ws calls",
        JSON_RULES[0],
        JSON_RULES[-1],
    )
    assert found.preserved_tokens == ("<tool_call>", "</function>", "</tool_call>")


def test_mistral_one_named_call() -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    found = constraint(caps("mistral"), TOOLS, named, parallel=False)
    assert found is not None
    assert (found.kind, found.grammar) == (
        "named",
        grammar(
            WS,
            'call-0 ::= "[TOOL_CALLS]" "get_weather" "[ARGS]" args-0',
            "call ::= call-0",
            "calls ::= call",
            "root ::= ws calls",
            *ARGS,
            *JSON_RULES[:3],
            *text_rules("json-text", ("[TOOL_CALLS]", "[ARGS]"), JSON_PLAIN, "json-escape"),
            JSON_RULES[-1],
        ),
    )


def test_none_bans_the_opener() -> None:
    found = constraint(caps("mistral"), TOOLS, "none")
    assert found is not None
    assert found.grammar == grammar(WS, *text_rules("free", ("[TOOL_CALLS]",)), "root ::= ws ( free )")


def test_json_schema_answer_after_free_reasoning() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    found = constraint(caps("hermes"), None, None, response_format=response_format)
    assert found is not None
    assert found.grammar == grammar(
        WS,
        *THOUGHT,
        'root ::= ws ( "<think>" thought "</think>" )? ws ( answer )',
        'answer-n-kv ::= "\\"n\\"" json-space ":" json-space json-integer',
        'answer ::= "{" json-space ( answer-n-kv ) "}" json-space',
        JSON_RULES[0],
        JSON_RULES[-1],
    )


def test_no_constraint() -> None:
    assert [constraint(caps("hermes"), tools, choice) for tools, choice in ((TOOLS, None), ([], "auto"))] == [
        constraint(caps("hermes"), TOOLS, "auto"),
        None,
    ]


def test_cached_per_tools_list() -> None:
    assert constraint(caps("hermes"), TOOLS, "required") is constraint(
        caps("hermes"), json.loads(json.dumps(TOOLS)), "required"
    )


@pytest.mark.parametrize(
    ("tools", "choice", "options", "message"),
    [
        (
            TOOLS,
            {"type": "function", "function": {"name": "nope"}},
            {},
            "tool_choice names 'nope', which is not among the tools",
        ),
        ([], "required", {}, 'tool_choice "required" without tools'),
        (TOOLS, "sometimes", {}, "tool_choice 'sometimes' is not auto, none, required or a function"),
        (
            TOOLS,
            "auto",
            {"response_format": {"type": "yaml"}},
            "response_format type 'yaml' is not text, json_object or json_schema",
        ),
    ],
)
def test_refused_by_name(tools: list[Any], choice: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConstraintError, match=message) as raised:
        constraint(caps("hermes"), tools, choice, **options)
    assert raised.value.field in ("tool_choice", "response_format")


QUOTED = CallFormat(
    begin="",
    call="<|tool_call>call:${name}${arguments}<tool_call|>",
    separator="",
    end="",
    arguments="quoted",
    parameter='${key}:<|"|>${value}<|"|>',
    shape="named",
)
JSON_STRING = CallFormat(
    begin="", call='{"name": "${name}", "arguments": ${arguments}}', separator=None, end="", arguments="json_string"
)


def test_a_form_without_rules_refused_by_name() -> None:
    found = Caps(template_sha256="s", engine="jinja2", tools=Tools(call_format=replace(JSON_STRING, shape="object")))
    with pytest.raises(ConstraintError, match="the 'json_string' form, which chatcaps cannot constrain yet"):
        constraint(found, TOOLS, "required")


def test_auto_on_a_form_without_rules_is_free() -> None:
    found = Caps(template_sha256="s", engine="jinja2", tools=Tools(call_format=replace(JSON_STRING, shape="object")))
    assert constraint(found, TOOLS, "auto") is None


def test_quoted_arguments() -> None:
    """gemma-4's `{city:<|"|>Paris<|"|>,days:3}`: strings between the template's quoting token, unquoted keys."""
    found = constraint(Caps(template_sha256="q", engine="jinja2", tools=Tools(call_format=QUOTED)), TOOLS, "required")
    assert found is not None
    names = ("quoted-text-lead", "quoted-text-chunk", "quoted-text", "quoted-value", "quoted-dict")
    assert rules(found, *names, "args-0-0", "args-0-1", "args-0-pair", "args-0", "call-0") == [
        *text_rules("quoted-text", ('<|"|>', "<|tool_call>", "<tool_call|>")),
        'quoted-value ::= "<|\\"|>" quoted-text "<|\\"|>" | py-number | "true" | "false" | "null" | "None" | '
        '"[" ( quoted-value ( "," quoted-value )* )? "]" | quoted-dict',
        'quoted-dict ::= "{" ( [^\\x3a\\x7b\\x7d\\x5b\\x5d\\x2c\\x3c]+ ":" quoted-value '
        '( "," [^\\x3a\\x7b\\x7d\\x5b\\x5d\\x2c\\x3c]+ ":" quoted-value )* )? "}"',
        'args-0-0 ::= "<|\\"|>" quoted-text "<|\\"|>"',
        'args-0-1 ::= "-"? ( "0" | [1-9] [0-9]* )',
        'args-0-pair ::= "city:" args-0-0 | "days:" args-0-1',
        'args-0 ::= "{" ( args-0-pair ( "," args-0-pair )* )? "}"',
        'call-0 ::= "<|tool_call>" "call:" "get_weather" args-0 "<tool_call|>"',
    ]


def test_json_answer_or_calls_with_auto() -> None:
    response_format = {"type": "json_object"}
    found = constraint(caps("mistral"), TOOLS, "auto", parallel=False, response_format=response_format)
    assert found is not None
    assert (found.kind, "root ::= ws ( json-object | calls )" in found.grammar.splitlines()) == ("json_schema", True)


def rules(found: Any, *names: str) -> list[str]:
    """The grammar's lines for the rules `names`, in the grammar's order."""
    return [line for line in found.grammar.splitlines() if line.partition(" ::= ")[0] in names]


def test_pythonic_calls_as_keyword_arguments() -> None:
    """`name(city='Paris', days=3)`: each argument JSON or a Python literal by its schema, the optional ones in the
    schema's order may be left out, a comma (and a space) between them."""
    found = constraint(caps("pythonic"), TOOLS, "required")
    assert found is not None
    assert rules(found, "kwarg-0-0-py", "kwarg-0-0", "kwarg-0-1-py", "kwarg-0-1", "kwargs-0-0", "call-0", "root") == [
        "kwarg-0-0-py ::= py-string",
        'kwarg-0-0 ::= "city=" ( json-string | kwarg-0-0-py )',
        'kwarg-0-1-py ::= "-"? ( "0" | [1-9] [0-9]* )',
        'kwarg-0-1 ::= "days=" ( json-integer | kwarg-0-1-py )',
        'kwargs-0-0 ::= ( "," " "? kwarg-0-1 )?',
        'call-0 ::= "get_weather" "(" ( kwarg-0-0 kwargs-0-0 ) ")"',
        "root ::= ws calls",
    ]
    stops = ("<|tool_call_start|>", "<|tool_call_end|>")  # the format's markers, kept out of a string
    escape = '"\\\\" [^\\x00-\\x1f\\x3c]'
    assert rules(found, "py-string", "py-text-1", "py-text-2") == [
        'py-string ::= "\'" py-text-1 "\'" | "\\"" py-text-2 "\\""',
        text_rules("py-text-1", stops, "'\\" + "".join(map(chr, range(0x20))), escape)[2],
        text_rules("py-text-2", stops, '"\\' + "".join(map(chr, range(0x20))), escape)[2],
    ]


def test_python_literal_parameter_values() -> None:
    """A list or dict parameter value a Jinja template prints as Python (`['a', 1]`) is allowed besides JSON."""
    tool = {"function": {"name": "tag", "parameters": {"properties": {"tags": {"type": "array"}}}}}
    found = constraint(caps("qwen3-coder"), [tool], "required")
    assert found is not None
    assert rules(found, "param-0-0", "param-0-0-value-py") == [
        'param-0-0-value-py ::= "[" ( py-value ( ", " py-value )* )? "]"',
        'param-0-0 ::= ws "<parameter=tags>" "\\x0a" ( json-array | param-0-0-value-py ) "\\x0a" "</parameter>"',
    ]


def test_prompt_that_wrote_the_opening() -> None:
    """functionary's generation prompt ends with `>>>`, its calls' opening: the first call goes on from there, the
    next ones open with it."""
    found = constraint(
        caps("functionary"), TOOLS, "required", prompt=DATA["formats"]["functionary"]["generation_prompt"]
    )
    assert found is not None
    assert rules(found, "call-0", "calls", "call-0-after-3", "call-after-3", "calls-after-3", "root") == [
        'call-0 ::= ">>>" "get_weather" "\\x0a" args-0',
        "calls ::= call ( ws call )*",
        'call-0-after-3 ::= "get_weather" "\\x0a" args-0',
        "call-after-3 ::= call-0-after-3",
        "calls-after-3 ::= call-after-3 ( ws call )*",
        "root ::= calls-after-3",
    ]


def test_none_after_a_prompt_that_wrote_the_opening() -> None:
    """After functionary's `>>>` the model names the recipient: `"none"` allows an answer's header (`all\\n`) only."""
    found = constraint(caps("functionary"), TOOLS, "none", prompt=DATA["formats"]["functionary"]["generation_prompt"])
    assert found is not None
    assert rules(found, "free", "root") == [
        'free ::= ( [^\\x3e] | ">" [^\\x3e] | ">>" [^\\x3e] )*',
        'root ::= ( ( "all\\x0a" ) free )',
    ]


def test_auto_after_a_prompt_that_wrote_the_opening() -> None:
    """The opener the lazy grammar would be triggered on is in the prompt: the grammar holds from the start, an
    answer (after its header) with calls after it, or the first call going on from the prompt."""
    found = constraint(caps("functionary"), TOOLS, "auto", prompt=DATA["formats"]["functionary"]["generation_prompt"])
    assert found is not None
    assert (found.kind, found.triggers, rules(found, "root")) == (
        "lazy",
        (),
        ['root ::= ( ( "all\\x0a" ) free ( ws calls )? | calls-after-3 )'],
    )
    assert "grammar_lazy" not in found.completion_fields()


def test_channel_style_reasoning_then_a_call_message() -> None:
    """gpt-oss: after the analysis channel's `<|end|>` the model opens a message as the generation prompt does
    (`<|start|>assistant`), and the call's own header goes on from there; `"none"` bans that rest there."""
    prompt = "Hi<|end|><|start|>assistant"
    found = constraint(caps("harmony"), TOOLS, "required", prompt=prompt)
    assert found is not None
    assert rules(found, "call-0-after-25", "root") == [
        'call-0-after-25 ::= " to=functions." "get_weather" "<|channel|>" "commentary json" "<|message|>" args-0 '
        '"<|call|>"',
        'root ::= ws ( "<|channel|>" "analysis" "<|message|>" thought "<|end|>" "<|start|>" "assistant" )? '
        "calls-after-25",
    ]
    banned = constraint(caps("harmony"), TOOLS, "none", prompt=prompt)
    assert banned is not None
    rest = " to=functions."
    branches = [
        f'"{rest[:at]}" [^\\x{ord(char):02x}]' if at else f"[^\\x{ord(char):02x}]" for at, char in enumerate(rest)
    ]
    prefixes = [f'"{rest[:at]}"' for at in range(1, len(rest))]
    assert rules(banned, "free-after", "root") == [
        f'free-after ::= ( {" | ".join(branches)} ) free | {" | ".join(prefixes)} | ""',
        'root ::= ws ( "<|channel|>" "analysis" "<|message|>" thought "<|end|>" "<|start|>" "assistant" )? '
        "( free-after )",
    ]


def test_parameter_string_flag() -> None:
    """DSML writes `string="true"` for a string value and `string="false"` for a JSON one."""
    found = constraint(caps("dsml"), TOOLS, "required")
    assert found is not None
    assert rules(found, "param-0-0", "param-0-1") == [
        'param-0-0 ::= ws "<|DSML|parameter name=\\"city\\" string=\\"true\\">" param-0-0-text "</|DSML|parameter>"',
        'param-0-1 ::= ws "<|DSML|parameter name=\\"days\\" string=\\"false\\">" json-integer "</|DSML|parameter>"',
    ]


def test_parameter_type_name_and_reasoning_without_a_start_marker() -> None:
    """A parameter that names its value's type (`type="string"`) names an integer's as JSON does (`number`); a
    reasoning block with an end marker only is open from the reply's start; the end of turn's text before its last
    marker may close the turn."""
    found = constraint(caps("typed"), TOOLS, "required")
    assert found is not None
    assert rules(found, "param-0-1", "root") == [
        'param-0-1 ::= ws "<|open|>" "argument key=\\"days\\" type=\\"number\\"" "<|sep|>" json-integer "<|close|>" '
        '"argument" "<|sep|>"',
        'root ::= thought "[BEGIN FINAL RESPONSE]" ws calls ( "<|close|>" "message" "<|sep|>" | "<|sep|>" )?',
    ]
