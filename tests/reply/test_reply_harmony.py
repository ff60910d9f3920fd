"""Harmony (gpt-oss) replies as models write them: channels in every order, calls whose header is written in another
order than the template's, a commentary preamble, bad output (tests/data/reply/harmony.json), each read exactly, the
same one character at a time, and through transformers' `parse_response` on the exported template."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import DATA
from transformers.utils.chat_parsing import parse_response

from chatcaps import ChatTemplate, Reply, ReplyStream, parse_reply
from chatcaps.caps import CallFormat, Caps, Reasoning, Tools
from chatcaps.reply import response_template
from chatcaps.zoo import ZooTemplate

HARMONY: dict[str, Any] = json.loads((DATA / "reply" / "harmony.json").read_text("utf-8"))
CASES: list[dict[str, Any]] = HARMONY["cases"]
RAW_CASES: list[dict[str, Any]] = HARMONY["raw_cases"]
TOOLS: list[Any] = HARMONY["tools"]
HEADERS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|call|>", "<|return|>")
"""Header and closing tokens: grammar, never in a field."""


def harmony_caps() -> Caps:
    """Caps holding the data's parts: what detection finds for gpt-oss (checked below), nothing else."""
    parts = HARMONY["caps"]
    raw = parts["reasoning"]
    reasoning = Reasoning(**{**raw, "content_headers": tuple(raw["content_headers"])})
    tools = Tools(calls=True, call_format=CallFormat(**parts["call_format"]))
    return Caps(
        "",
        "jinja2",
        tools=tools,
        reasoning=reasoning,
        generation_prompt=parts["generation_prompt"],
        end_of_turn=parts["end_of_turn"],
    )


def expected_reply(case: dict[str, Any]) -> Reply:
    expected = case["expected"]
    return Reply(
        expected["content"],
        expected["reasoning_content"],
        tuple(expected["tool_calls"]),
        finish=expected["finish"],
        warnings=tuple(expected["warnings"]),
    )


def test_the_caps_parts_are_what_detection_finds(zoo: tuple[ZooTemplate, ...]) -> None:
    entry = next(entry for entry in zoo if entry.file == HARMONY["found_in"])
    caps = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token).caps
    found = harmony_caps()
    assert caps.reasoning.start_marker == found.reasoning.start_marker == "<|channel|>analysis<|message|>"
    assert caps.reasoning.end_marker == found.reasoning.end_marker == "<|end|>"
    assert caps.reasoning.content_headers == found.reasoning.content_headers
    assert caps.reasoning.content_headers == ("<|start|>assistant<|channel|>final<|message|>",)
    assert (caps.reasoning.format, caps.reasoning.default_state) == (found.reasoning.format, "free")
    assert (caps.generation_prompt, caps.end_of_turn) == (found.generation_prompt, found.end_of_turn)
    assert caps.tools.call_format == found.tools.call_format


@pytest.mark.parametrize("case", CASES, ids=[case["case"] for case in CASES])
def test_parse_reply(case: dict[str, Any]) -> None:
    caps = harmony_caps()
    assert parse_reply(case["text"], caps, prefix=caps.generation_prompt, tools=TOOLS) == expected_reply(case)


@pytest.mark.parametrize("size", [1, 2, 7])
@pytest.mark.parametrize("case", CASES, ids=[case["case"] for case in CASES])
def test_the_stream_gives_the_batch_reply(case: dict[str, Any], size: int) -> None:
    """Cut in pieces of `size` characters: the same Reply, and the deltas merge into it (never marker text)."""
    caps = harmony_caps()
    stream = ReplyStream(caps, prefix=caps.generation_prompt, tools=TOOLS)
    text = case["text"]
    deltas = stream.initial + [d for at in range(0, len(text), size) for d in stream.feed(text[at : at + size])]
    deltas += stream.close()
    reply = expected_reply(case)
    assert stream.reply == reply
    merged = {key: "".join(delta.get(key, "") for delta in deltas) for key in ("reasoning_content", "content")}
    assert merged == {"reasoning_content": reply.reasoning_content or "", "content": reply.content}
    assert [header for header in HEADERS for text in merged.values() if header in text] == []
    calls: dict[int, dict[str, str]] = {}
    for delta in deltas:
        for call in delta.get("tool_calls", ()):
            function = calls.setdefault(call["index"], {"name": "", "arguments": ""})
            function["name"] += call.get("function", {}).get("name", "")
            function["arguments"] += call.get("function", {}).get("arguments", "")
    assert list(calls.values()) == [call["function"] for call in reply.tool_calls]


@pytest.mark.parametrize("case", [case for case in CASES if not case["expected"]["warnings"]], ids=lambda c: c["case"])
def test_transformers_reads_the_exported_template_the_same(case: dict[str, Any]) -> None:
    caps = harmony_caps()
    message = parse_response(case["text"], response_template(caps), prefix=caps.generation_prompt, tools=TOOLS)
    reply = expected_reply(case)
    assert message.get("content", "") == reply.content
    assert message.get("reasoning_content") == reply.reasoning_content
    read = [(call["function"]["name"], call["function"]["arguments"]) for call in message.get("tool_calls", ())]
    assert read == [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in reply.tool_calls]


def test_another_channel_style_template_reads_a_call_after_its_reasoning(zoo: tuple[ZooTemplate, ...]) -> None:
    """Solar-Open's `<|think|>` channel ends at `<|end|>` too; the next message's opening before its call section
    (`<|begin|>assistant<|tool_calls|>`) is grammar, not content."""
    entry = next(entry for entry in zoo if entry.file == "llamacpp__upstage-Solar-Open-100B.jinja")
    template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
    assert template.caps.reasoning.content_headers == ("<|begin|>assistant<|content|>",)
    result = template.render([{"role": "user", "content": "Hi"}], tools=TOOLS)
    text = (
        "<|think|>Weather first.<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>abc123456"
        '<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Paris"}<|tool_call:end|><|calls|>'
    )
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    call = {"id": "abc123456", "type": "function", "function": function}
    assert result.parse_reply(text) == Reply("", "Weather first.", (call,))
    answer = "<|think|>Plan.<|end|><|begin|>assistant<|content|>Sunny.<|end|>"
    assert result.parse_reply(answer) == Reply("Sunny.", "Plan.")


def test_raw_keeps_the_channels_in_content_and_still_reads_the_call() -> None:
    caps = harmony_caps()
    analysis = "<|channel|>analysis<|message|>Need weather."
    call = (
        "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris"}<|call|>'
    )
    reply = parse_reply(analysis + call, caps, prefix=caps.generation_prompt, tools=TOOLS, raw=True)
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert reply == Reply(analysis, None, ({"id": "call_0", "type": "function", "function": function},))


@pytest.mark.parametrize("case", RAW_CASES, ids=[case["case"] for case in RAW_CASES])
def test_raw_takes_out_the_answer_headers(case: dict[str, Any]) -> None:
    """`raw=True` keeps the reasoning as written but an answer's header is grammar, raw or not: in one go and one
    character at a time, the same Reply."""
    caps = harmony_caps()
    reply = parse_reply(case["text"], caps, prefix=caps.generation_prompt, tools=TOOLS, raw=True)
    assert reply == Reply(case["content"], None, tuple(case["tool_calls"]))
    stream = ReplyStream(caps, prefix=caps.generation_prompt, tools=TOOLS, raw=True)
    deltas = stream.initial + [delta for char in case["text"] for delta in stream.feed(char)] + stream.close()
    assert stream.reply == reply
    assert "".join(delta.get("content", "") for delta in deltas) == reply.content


MUSE_CALL = (
    '<|start|>assistant to=get_time<|message|><atem:function_calls>\n<atem:invoke name="get_time">\n'
    '<atem:parameter name="zone">UTC</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>'
)
MUSE_TIME = {"id": "call_0", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        (" to=user<|message|>Hello.<|eot|>", Reply("Hello.")),
        ("<|start|>assistant to=user<|message|>Hello.", Reply("Hello.")),
        ("to=self<|message|>Think.<|eom|><|start|>assistant to=user<|message|>Hi.<|eot|>", Reply("Hi.", "Think.")),
        (" to=user<|message|>Let me check.<|eom|>" + MUSE_CALL, Reply("Let me check.", None, (MUSE_TIME,))),
        ("to=self<|message|>Think.<|eom|>" + MUSE_CALL, Reply("", "Think.", (MUSE_TIME,))),
        (
            "to=self<|message|>One.<|eom|><|start|>assistant to=self<|message|>Two.<|eom|>"
            "<|start|>assistant to=user<|message|>Hi.<|eot|>",
            Reply("Hi.", "One.\n\nTwo."),
        ),
    ],
)
def test_an_answer_header_with_a_recipient_is_grammar(text: str, reply: Reply, zoo: tuple[ZooTemplate, ...]) -> None:
    """muse-glimmer writes each channel as a message of its own addressed by a recipient: `to=self` the reasoning,
    `to=user` the answer, `to=NAME` a call. Detection finds the answer's header by rendering (channel-style, its
    recipient included); the answer's header is grammar, a call's recipient a call, in one go and streamed."""
    entry = next(entry for entry in zoo if entry.file == "llamacpp__muse-glimmer.jinja")
    template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
    reasoning = template.caps.reasoning
    assert (reasoning.content_headers, reasoning.channel_style) == (("<|start|>assistant to=user<|message|>",), True)
    tools = [{"type": "function", "function": {"name": "get_time", "description": "Time.", "parameters": {}}}]
    result = template.render([{"role": "user", "content": "Hi"}], tools=tools)
    assert result.parse_reply(text) == reply
    stream = result.reply_stream()
    deltas = stream.initial + [delta for char in text for delta in stream.feed(char)] + stream.close()
    assert stream.reply == reply
    assert "".join(delta.get("content", "") for delta in deltas) == reply.content
