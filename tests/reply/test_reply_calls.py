"""Tool calls on the reply side: model replies per call format as real models write them, and bad output
(tests/data/reply/calls.json), the exported template's `tool_calls` field, streaming equal to batch for any
chunking, and no generated character dropped."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import ROOT
from test_reply import byte_tokenizer
from transformers.utils.chat_parsing import parse_response

from chatcaps import Reply, ReplyStream, parse_reply
from chatcaps.caps import CallFormat, Caps, Reasoning, Tools
from chatcaps.polyfills.validate import validate_messages
from chatcaps.reply import response_template
from chatcaps.reply.parameters import NESTING_LIMIT, parameter_pattern, parameter_value, typed
from chatcaps.reply.values import LITERAL_LIMIT, coerce, schema_types

DATA: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "reply" / "calls.json").read_text("utf-8"))
TOOLS: list[dict[str, Any]] = DATA["tools"]
CASES: list[dict[str, Any]] = DATA["cases"]


def caps_for(name: str) -> Caps:
    """Caps with the format's call format and end of turn and a Qwen3-like reasoning block."""
    found = DATA["formats"][name]
    reasoning = Reasoning("reasoning_content", start_marker="<think>", end_marker="</think>", default_state="free")
    tools = Tools(calls=True, call_format=CallFormat.from_dict(found["call_format"]))
    return Caps("", "jinja2", tools=tools, reasoning=reasoning, end_of_turn=found["end_of_turn"])


def reply_of(case: dict[str, Any]) -> Reply:
    policy = case.get("calls_in_reasoning", "call")
    return parse_reply(case["text"], caps_for(case["format"]), tools=TOOLS, calls_in_reasoning=policy)


@pytest.mark.parametrize("case", CASES, ids=[f"{case['format']}: {case['case']}" for case in CASES])
def test_parse_reply(case: dict[str, Any]) -> None:
    reply = reply_of(case)
    expected = case["expected"]
    assert reply == Reply(
        expected["content"],
        expected["reasoning_content"],
        tuple(expected["tool_calls"]),
        warnings=tuple(expected["warnings"]),
        finish=reply.finish,
    )


def test_every_format_has_realistic_and_bad_cases() -> None:
    by_format = Counter(case["format"] for case in CASES)
    assert set(by_format) == set(DATA["formats"])
    assert min(by_format.values()) >= 2


def test_to_message_of_calls_alone_has_no_content() -> None:
    """OpenAI's shape, also canonical input: `content` None where the model only called tools."""
    case = next(case for case in CASES if case["format"] == "hermes" and case["case"] == "as rendered")
    message = reply_of(case).to_message()
    validate_messages([{"role": "user", "content": "Hi"}, message], caps_for("hermes"))  # taken back as history
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
            }
        ],
    }


def test_to_message_carries_the_calls() -> None:
    case = next(case for case in CASES if case["case"] == "content before a call")
    assert reply_of(case).to_message() == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
            }
        ],
    }


def test_exported_field_for_a_tagged_json_format() -> None:
    template = response_template(caps_for("hermes"))
    assert template["fields"]["tool_calls"] == {
        "open_pattern": r"<tool_call>",
        "repeats": True,
        "close_pattern": r"</tool_call>",
        "content": "json",
        "transform": {"type": "function", "function": {"name": "{content.name}", "arguments": "{content.arguments}"}},
    }
    assert template["fields"]["content"] == {"content": "text", "repeats": True, "join": ""}


def test_exported_field_for_parameters() -> None:
    field = response_template(caps_for("qwen3_coder"))["fields"]["tool_calls"]
    assert field == {
        "open_pattern": r"<tool_call>\s*<function=(?P<name>[\w.\-]+)>",
        "repeats": True,
        "close_pattern": r"</function>\s*</tool_call>",
        "content": "xml-inline",
        "content_args": {"tag_pattern": r"<parameter=(?P<key>[^<>\"=\n]+?)>\s*(?P<value>.*?)\s*</parameter>"},
        "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
    }


@pytest.mark.parametrize("name", sorted(DATA["formats"]))
def test_parse_response_reads_the_calls_parse_reply_reads(name: str) -> None:
    """transformers' own `parse_response` on the exported template: the same calls, arguments typed from the tools
    (a dict where chatcaps writes the JSON text; the JSON text as written where the model wrote the arguments as a
    JSON string), for every case chatcaps reads without a warning, but those where chatcaps reads a value more
    exactly than the exported template can (`exported_differs` says how)."""
    template = response_template(caps_for(name))
    for case in CASES:
        reply = reply_of(case)
        if case["format"] != name or reply.warnings or "exported_differs" in case:
            continue
        tools: list[Any] = TOOLS
        message = parse_response(case["text"], template, prefix="", tools=tools)
        calls = message.get("tool_calls", ())
        read = [(call["function"]["name"], _object(call["function"]["arguments"])) for call in calls]
        expected = [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in reply.tool_calls]
        assert read == expected, case["case"]
        assert message.get("content", "") == reply.content, case["case"]


def _object(arguments: Any) -> Any:
    return json.loads(arguments) if isinstance(arguments, str) else arguments


def test_tokenizer_parse_response_reads_calls() -> None:
    """`tokenizer.response_template = response_template(caps)` on a real tokenizer built here: token ids of a reply
    with reasoning, content and two calls."""
    caps = caps_for("hermes")
    tokenizer = byte_tokenizer("", ("<|endoftext|>",), ("<think>", "</think>", "<tool_call>", "</tool_call>"))
    tokenizer.response_template = response_template(caps)
    text = (
        '<think>\nWeather first.\n</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris", "days": 3}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": '
        '{"zone": "UTC"}}\n</tool_call><|im_end|>'
    )
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.parse_response(ids, prefix=[]) == {
        "role": "assistant",
        "reasoning_content": "Weather first.",
        "content": "Checking.",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}},
            {"type": "function", "function": {"name": "get_time", "arguments": {"zone": "UTC"}}},
        ],
    }


@st.composite
def chunked_case(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    case = draw(st.sampled_from(CASES))
    text = case["text"]
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    return case, [text[start:stop] for start, stop in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def streamed(case: dict[str, Any], chunks: list[str]) -> tuple[Reply, list[dict[str, Any]]]:
    policy = case.get("calls_in_reasoning", "call")
    stream = ReplyStream(caps_for(case["format"]), tools=TOOLS, calls_in_reasoning=policy)
    deltas = list(stream.initial)
    for chunk in chunks:
        deltas += stream.feed(chunk)
    deltas += stream.close()
    return stream.reply, deltas


@settings(max_examples=400, deadline=None)
@given(chunked_case())
def test_streaming_equals_batch(sample: tuple[dict[str, Any], list[str]]) -> None:
    """Any chunking: the same Reply, and the deltas merge into it: a call's name once, its arguments in order."""
    case, chunks = sample
    reply, deltas = streamed(case, chunks)
    assert reply == reply_of(case)
    merged = {key: "".join(delta.get(key, "") for delta in deltas) for key in ("reasoning_content", "content")}
    assert merged == {"reasoning_content": reply.reasoning_content or "", "content": reply.content}
    assert merged_calls(deltas) == list(reply.tool_calls)
    assert all(len(delta) == 1 for delta in deltas)


def merged_calls(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls a client rebuilds from `tool_calls` deltas: a call's first piece (index, id, type, name) opens it,
    later pieces of the same index only add to its arguments; indexes come in order."""
    calls: list[dict[str, Any]] = []
    for piece in (piece for delta in deltas for piece in delta.get("tool_calls", ())):
        if "id" in piece:
            assert piece["index"] == len(calls)
            calls.append({key: value for key, value in json.loads(json.dumps(piece)).items() if key != "index"})
        else:
            assert set(piece) == {"index", "function"} and set(piece["function"]) == {"arguments"}
            assert piece["index"] == len(calls) - 1 and piece["function"]["arguments"]
            calls[-1]["function"]["arguments"] += piece["function"]["arguments"]
    return calls


def test_one_character_at_a_time_gives_the_batch_reply_and_never_sends_marker_text() -> None:
    """Marker text reaches the content only where a call does not parse (then it is kept, where it stood)."""
    for case in CASES:
        reply, deltas = streamed(case, list(case["text"]))
        assert reply == reply_of(case), case["case"]
        if any("kept as content" in warning for warning in reply.warnings):
            continue
        sent = "".join(delta.get("content", "") for delta in deltas)
        markers = ("<tool_call>", "[TOOL_CALLS]", "<\N{FULLWIDTH VERTICAL LINE}tool", "<|tool_call", "<invoke")
        for marker in (*markers, "<|python_tag|>", "<|eom_id|>"):
            assert marker not in sent, case["case"]


CALL_TEXT = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>'
GET_TIME = {"id": "call_0", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}


def test_a_call_inside_the_reasoning_is_held_until_the_end_marker_or_the_end_of_the_text() -> None:
    """Nothing after a call's opening inside the reasoning is sent until it is decided: the end marker after it makes
    its text reasoning text, sent with what followed; the text ending first makes it a call."""
    closed = ReplyStream(caps_for("hermes"), tools=TOOLS)
    pieces = ["<think>plan ", CALL_TEXT, " more</thi", "nk>Ok."]
    assert [closed.feed(piece) for piece in pieces] + [closed.close()] == [
        [{"reasoning_content": "plan"}],
        [],
        [],
        [{"reasoning_content": f" {CALL_TEXT} more"}, {"content": "Ok."}],
        [],
    ]
    never_closed = ReplyStream(caps_for("hermes"), tools=TOOLS)
    pieces = ["<think>plan ", CALL_TEXT, " more"]
    assert [never_closed.feed(piece) for piece in pieces] + [never_closed.close()] == [
        [{"reasoning_content": "plan"}],
        [],
        [],
        [{"tool_calls": [{"index": 0, **GET_TIME}]}, {"content": "more"}],
    ]
    ended = "the reasoning block ended at a tool call, without its end marker '</think>'"
    assert never_closed.reply.warnings == (ended,)


WORDS = ("Paris", "UTC", "three", "hmm", "Done", "Ok")
"""Plain words of the cases: each must end up in a field or in a warning."""


def _quoted(warnings: tuple[str, ...]) -> str:
    found = (re.search(r": ('.*'|\".*\")$", warning) for warning in warnings)
    return "".join(str(ast.literal_eval(match.group(1))) for match in found if match)


@pytest.mark.parametrize("case", CASES, ids=[f"{case['format']}: {case['case']}" for case in CASES])
def test_no_generated_word_is_dropped(case: dict[str, Any]) -> None:
    """Every plain word the model wrote is in the content, the reasoning, a call's arguments or a warning's quoted
    text, as often as it was written."""
    reply = reply_of(case)
    kept = reply.content + (reply.reasoning_content or "") + _quoted(reply.warnings)
    kept += "".join(call["function"]["arguments"] for call in reply.tool_calls)
    for word in WORDS:
        assert kept.count(word) >= case["text"].count(word), word


def fragments(name: str) -> list[str]:
    """Pieces a model's text for this format is made of: the format's own texts, whole and in halves, a call, JSON
    pieces, reasoning markers, the end of turn, plain letters and whitespace."""
    found = DATA["formats"][name]
    call_format = found["call_format"]
    texts = [call_format["begin"], call_format["end"], call_format["separator"] or "", found["end_of_turn"] or ""]
    texts += call_format.get("alternative_openers", []) + call_format.get("alternative_turn_ends", [])
    texts += re.split(r"\$\{\w+\}", call_format["call"]) + re.split(r"\$\{\w+\}", call_format["parameter"] or "")
    texts = [text for text in texts if text.strip()]
    pieces = texts + [text[: len(text) // 2] for text in texts] + [text[len(text) // 2 :] for text in texts]
    plain = ["Q", "W", " ", "\n", "; "]
    return [*pieces, "get_time", "zone", '{"zone": "Q"}', "{", "}", '"', "<think>", "</think>", *plain]


@st.composite
def generated(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    name = draw(st.sampled_from(sorted(DATA["formats"])))
    text = "".join(draw(st.lists(st.sampled_from(fragments(name)), max_size=16)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    return name, text, [text[start:stop] for start, stop in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@settings(max_examples=500, deadline=None)
@given(generated(), st.sampled_from(["call", "keep", "recover"]))
def test_any_text_parses_the_same_streamed_and_keeps_every_letter(
    sample: tuple[str, str, list[str]], policy: str
) -> None:
    """Texts made of the format's pieces in any order: no exception, the stream gives the batch Reply for any
    chunking, and every plain letter (Q, W) ends up in a field, a call or a warning's quoted text."""
    name, text, chunks = sample
    caps = caps_for(name)
    batch = parse_reply(text, caps, tools=TOOLS, calls_in_reasoning=policy)  # type: ignore[arg-type]
    stream = ReplyStream(caps, tools=TOOLS, calls_in_reasoning=policy)  # type: ignore[arg-type]
    deltas = [delta for chunk in chunks for delta in stream.feed(chunk)] + stream.close()
    assert stream.reply == batch
    merged = "".join(delta.get("content", "") for delta in deltas)
    assert merged == batch.content
    kept = batch.content + (batch.reasoning_content or "") + _quoted(batch.warnings)
    kept += "".join(call["function"]["name"] + call["function"]["arguments"] for call in batch.tool_calls)
    for letter in "QW":  # in no format's texts
        assert kept.count(letter) >= text.count(letter), (letter, text, batch)


def test_arguments_stream_as_they_come() -> None:
    """A name-first format: the name's delta as soon as the name is complete, then the arguments in pieces: JSON text
    as it arrives, a parameter once its closing tag is in; the closing brace when the call's region closes (here at
    the text's end: a closing pattern that ends the text is held until then)."""
    stream = ReplyStream(caps_for("mistral_args"), tools=TOOLS)
    pieces = ["[TOOL_CALLS]get_wea", "ther[AR", 'GS]{"city": "Pa', 'ris"}']
    assert [stream.feed(piece) for piece in pieces] + [stream.close()] == [
        [],
        [],
        [
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            },
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Pa'}}]},
        ],
        [{"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]}],
        [],
    ]
    stream = ReplyStream(caps_for("qwen3_coder"), tools=TOOLS)
    pieces = [
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
        "is\n</parameter>\n<parameter=days>\n3\n</par",
    ]
    pieces += ["ameter>\n</function>\n</tool_call>"]
    assert [stream.feed(piece) for piece in pieces] + [stream.close()] == [
        [
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ],
        [{"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Paris"'}}]}],
        [{"tool_calls": [{"index": 0, "function": {"arguments": ', "days": 3'}}]}],
        [{"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}],
    ]


SCHEMAS: list[Any] = [
    None,
    "string",
    {},
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": "object"},
    {"type": "array"},
    {"type": ["integer", "null"]},
    {"type": ["string", "integer"]},
    {"anyOf": [{"type": "array"}, {"type": "boolean"}]},
    {"oneOf": [{"type": "number"}, {"anyOf": [{"type": "object"}]}]},
    {"type": "integer", "nullable": True},
    {"type": ["null", 3, "number"]},
]
VALUES = [
    "3",
    " 3 ",
    "3.0",
    "3.5",
    "-0",
    "1e3",
    "1e999",
    "nan",
    "inf",
    "true",
    "True",
    " FALSE ",
    "1",
    "0",
    "null",
    "None",
    "",
    "x",
    '{"a": 1}',
    "[1, 2]",
    "{'a': 1}",
    "[1,",
    "0x10",
    "1_000",
    "\n42\n",
]


def test_coercion_is_transformers_own() -> None:
    """chatcaps' `schema_types` and `coerce` give what transformers' private `_schema_types` and `_coerce` (which
    `ResponseParser` types tool-call arguments with) give, on every pair of the table, while those exist."""
    private = pytest.importorskip("transformers.utils.chat_parsing.response_parser")
    if not hasattr(private, "_coerce") or not hasattr(private, "_schema_types"):
        pytest.skip("transformers no longer has the private functions: the table pins chatcaps' own")
    for schema in SCHEMAS:
        types = schema_types(schema)
        assert types == private._schema_types(schema), schema
        for value in VALUES:
            ours, theirs = coerce(value, types), private._coerce(value, types)
            assert (type(ours), ours) == (type(theirs), theirs) or ours != ours, (schema, value)


def test_typed_reads_python_literals_only_where_the_schema_wants_them() -> None:
    assert typed("{'len': 'm', 'n': (1, None)}", {"type": "object"}) == {"len": "m", "n": [1, None]}
    assert typed("['a', True]", {"type": ["array", "null"]}) == ["a", True]
    assert typed("{'len': 'm'}", {"type": "string"}) == "{'len': 'm'}"
    assert typed("['a']", {"type": "object"}) == "['a']"
    assert typed("{1, 2}", {"type": "array"}) == "{1, 2}"  # a set is no JSON
    deep = "[" * 5000 + "None" + "]" * 5000
    assert typed(deep, {"type": "array"}) == deep  # too deep for Python's parser: kept as text
    assert typed("[1]" + " " * LITERAL_LIMIT, {"type": "array"}) == [1]  # JSON first: no limit
    assert typed("[1, None]" + " " * LITERAL_LIMIT, {"type": "array"}) == "[1, None]" + " " * LITERAL_LIMIT


def test_a_parameter_value_loses_only_the_templates_layout() -> None:
    qwen = caps_for("qwen3_coder").tools.call_format
    glm = caps_for("glm").tools.call_format
    assert qwen is not None and glm is not None
    assert parameter_value("\n    print(x)\n", qwen) == "    print(x)"
    assert parameter_value("\n\n  a  \n\n", qwen) == "\n  a  \n"
    assert parameter_value("Paris", qwen) == "Paris"
    assert parameter_value(" Paris ", glm) == " Paris "
    assert parameter_value("<![CDATA[a < b\n]]>", glm) == "a < b\n"
    assert parameter_value("\n<![CDATA[x]]>\n", qwen) == "x"
    assert parameter_value("<![CDATA[a]]> and <![CDATA[b]]>", glm) == "<![CDATA[a]]> and <![CDATA[b]]>"


def nested(key: str, value: str) -> str:
    """One parameter of MiniMax-M3's format (tests/data/reply/calls.json), which nests parameters in a value."""
    return f"]<]minimax[>[<{key}>{value}]<]minimax[>[</{key}>"


def test_parameters_inside_a_value_read_as_the_schema_says() -> None:
    """Members and items written as parameters inside a value: JSON where the schema says object or array, each typed
    from its own schema; text where the schema has no object or array first, or the text is not such parameters."""
    calls = caps_for("minimax_m3").tools.call_format
    assert calls is not None
    point = nested("x", "1.5") + nested("y", "2")
    number = {"type": "number"}
    assert typed(point, {"type": "object", "properties": {"x": number}}, calls) == {"x": 1.5, "y": "2"}
    rows = nested("item", nested("item", "1") + nested("item", "2")) + "\n" + nested("item", "")
    items = {"type": "array", "items": {"type": "integer"}}
    assert typed(rows, {"type": "array", "items": items}, calls) == [[1, 2], ""]  # an empty value holds none
    assert typed(rows, {"type": "array"}, calls) == [nested("item", "1") + nested("item", "2"), ""]
    assert typed(point, {"anyOf": [{"type": "integer"}, {"type": "object"}]}, calls) == {"x": "1.5", "y": "2"}
    assert typed(point, {"oneOf": [{"type": "string"}, {"type": "object"}]}, calls) == point
    assert typed(point, {"type": "object"}) == point  # no format to read it with
    inner = {"type": "object", "properties": {"a": {"type": "object"}}}
    assert typed(nested("a", nested("a", "1")) + nested("b", "<br> x"), inner, calls) == {
        "a": {"a": "1"},
        "b": "<br> x",
    }
    assert typed(nested("b", "]<]minimax[>[<br> x"), {"type": "object"}, calls) == {"b": "]<]minimax[>[<br> x"}
    for text in ("", "x" + point, point + "x", nested("x", "1")[:-1], point.replace("</y>", "</z>")):
        assert typed(text, {"type": "object"}, calls) == text, text
    deep, schema = "1", dict[str, Any]({"type": "array"})
    for _ in range(NESTING_LIMIT + 1):
        deep, schema = nested("item", deep), {"type": "array", "items": schema}
    read = typed(deep, schema, calls)
    for _ in range(NESTING_LIMIT - 1):
        read = read[0]
    assert read == [nested("item", "1")]  # deeper than the limit: text


def test_a_cdata_section_is_one_piece_of_a_value() -> None:
    """The parameter's closing text inside a CDATA section the value opens with does not end the value, and a section
    not closed yet completes no parameter (a stream waits for it)."""
    calls = caps_for("minicpm5").tools.call_format
    assert calls is not None
    pattern = parameter_pattern(calls)
    assert pattern is not None
    found = pattern.match('<param name="a"><![CDATA[<p>x</param>]]></param>')
    assert found is not None and parameter_value(found["value"], calls) == "<p>x</param>"
    assert pattern.match('<param name="a"><![CDATA[<p>x</param>') is None
    found = pattern.match('<param name="a">x <![CDATA[y</param>]]></param>')
    assert found is not None and found["value"] == "x <![CDATA[y"


DSML = CallFormat(
    begin="\n\n<\uff5cDSML\uff5cfunction_calls>\n",
    call='<\uff5cDSML\uff5cinvoke name="${name}">${arguments}\n</\uff5cDSML\uff5cinvoke>\n',
    separator="",
    end="</\uff5cDSML\uff5cfunction_calls>",
    arguments="parameters",
    parameter='\n<\uff5cDSML\uff5cparameter name="${key}" string="true">${value}</\uff5cDSML\uff5cparameter>',
    exact_values=True,
    shape="named",
)
"""DeepSeek V3.2's call format as detected (`llamacpp__deepseek-ai-DeepSeek-V3.2.jinja`)."""


def test_a_value_the_format_types_is_read_as_its_type() -> None:
    """DSML writes `string="false"` before a value that is JSON: read as JSON without a schema, a string stays a
    string (`string="true"`), and a value flagged as JSON that does not parse is typed as any other."""
    caps = Caps(
        "", "jinja2", tools=Tools(calls=True, call_format=DSML), end_of_turn="<\uff5cend\u2581of\u2581sentence\uff5c>"
    )
    parameter = '<\uff5cDSML\uff5cparameter name="{}" string="{}">{}</\uff5cDSML\uff5cparameter>\n'
    params = [("n", "false", "42"), ("on", "false", "true"), ("xs", "false", "[1, 2]"), ("s", "true", "42")]
    params += [("bad", "false", "[1,")]
    text = '<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name="f">\n'
    text += "".join(parameter.format(*param) for param in params)
    text += "</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5cfunction_calls>"
    reply = parse_reply(text, caps)
    arguments = '{"n": 42, "on": true, "xs": [1, 2], "s": "42", "bad": "[1,"}'
    assert reply == Reply(
        "", None, ({"id": "call_0", "type": "function", "function": {"name": "f", "arguments": arguments}},)
    )
    stream = ReplyStream(caps)
    for char in text:
        stream.feed(char)
    stream.close()
    assert stream.reply == reply
