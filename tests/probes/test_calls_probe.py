"""The tool-call format and the end of turn, found by rendering (probes/calls.py): small templates written for these
tests (tests/data/call_format_templates.json), each with the exact format detect_caps must find; and Caps of
schema 1 rejected."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import ROOT

from chatcaps import ChatTemplate, detect_caps, parse_reply
from chatcaps.caps import Caps
from chatcaps.engines import compile_template, mutable_renderer
from chatcaps.vocab import common_prefix_length

TEMPLATES: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "call_format_templates.json").read_text("utf-8"))[
    "templates"
]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_call_format_and_end_of_turn(name: str) -> None:
    case = TEMPLATES[name]
    caps = detect_caps(case["template"])
    assert caps.to_dict()["tools"]["call_format"] == case["call_format"]
    assert caps.end_of_turn == case["end_of_turn"]


def test_a_template_without_calls_has_no_format() -> None:
    caps = detect_caps("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    assert (caps.tools.calls, caps.tools.call_format) == (False, None)


def test_schema_1_is_rejected() -> None:
    data = detect_caps(TEMPLATES["json in tags"]["template"]).to_dict()
    assert Caps.from_json(data) == Caps.from_json(json.dumps(data))
    with pytest.raises(ValueError, match="schema_version 1 is not 2; detect the caps again"):
        Caps.from_json({**data, "schema_version": 1})


CALLS: list[dict[str, Any]] = [
    {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zü", "n": 2}}},
    {"id": "xyzXYZ789", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "UTC"}}},
]
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties}}}
    for name, properties in (
        ("get_weather", {"city": {"type": "string"}, "n": {"type": "integer"}}),
        ("get_time", {"zone": {"type": "string"}}),
    )
]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_the_found_format_reads_the_templates_own_turn(name: str) -> None:
    """Render a turn with calls, cut off the prompt, read it back with `parse_reply` (the tools' schemas type the
    parameters form's values): the same calls."""
    template = ChatTemplate(TEMPLATES[name]["template"])
    call_format = template.caps.tools.call_format
    calls = CALLS if call_format is not None and call_format.separator is not None else CALLS[:1]
    chat = [{"role": "user", "content": "Hi"}]
    prompt = template.render(chat).prompt
    if TEMPLATES[name].get("calls_need_null_content"):  # `render` sends None content as "": the template's own render
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        turn = template.render_raw([*chat, message], add_generation_prompt=False)
    elif TEMPLATES[name].get("calls_refused"):  # `render` writes calls as text: the turn as the template writes it
        message = {"role": "assistant", "content": "", "tool_calls": calls}
        renderer = mutable_renderer(compile_template(TEMPLATES[name]["template"]))
        turn = renderer.render({"messages": [*chat, message], "add_generation_prompt": False})
    else:
        turn = template.render(
            [*chat, {"role": "assistant", "content": "", "tool_calls": calls}], add_generation_prompt=False
        ).prompt
    text = turn[common_prefix_length(prompt, turn) :]
    reply = parse_reply(text, template.caps, prefix=prompt, tools=TOOLS)
    read = [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in reply.tool_calls]
    assert read == [(call["function"]["name"], call["function"]["arguments"]) for call in calls]
    assert (reply.content, reply.warnings) == ("", ())


def test_a_position_written_as_an_id_is_the_calls_id() -> None:
    """A template that writes each call's position where others write the request's id (a counter its tool results
    quote, as Cohere's do): a reply's calls take what they write there as their ids, not `call_<index>`."""
    source = TEMPLATES["a JSON list whose calls write their position as an id, after layout"]["template"]
    template = ChatTemplate(source)
    text = (
        '<|action|>[\n    {"call_id": "0", "name": "get_weather", "args": {"city": "Zü", "n": 2}},\n'
        '    {"call_id": "1", "name": "get_time", "args": {"zone": "UTC"}}\n]<|/action|>'
    )
    reply = parse_reply(text, template.caps, tools=TOOLS)
    assert [(call["id"], call["function"]["name"]) for call in reply.tool_calls] == [
        ("0", "get_weather"),
        ("1", "get_time"),
    ]


def test_calls_the_sandbox_refuses_keep_calls_false() -> None:
    """Where every turn with a call changes a list the template builds, transformers' immutable sandbox refuses it
    and so does chatcaps' render: Caps say the template renders no calls (the polyfill writes them as text), name
    the refused probes, and still hold the format a model writes, read off renders that allow the change; both
    engines find it."""
    source = TEMPLATES["calls whose ids the template collects with list.append, which the immutable sandbox refuses"]
    for engine in ("jinja2", "minijinja"):
        caps = detect_caps(source["template"], engine=engine)
        assert (caps.tools.calls, caps.to_dict()["tools"]["call_format"]) == (False, source["call_format"])
        assert [error.probe for error in caps.probe_errors] == ["tools.calls.object", "tools.calls.string"]
