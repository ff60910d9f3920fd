"""`chatcaps.hook.prerender`: OpenAI chat-completions bodies rendered through small templates, one per mechanism
(tests/data/probe_templates.json), with the intent taken from each of the request's spellings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatcaps import ChatTemplate, InputError, Reply
from chatcaps.hook import PostStream, choice, postprocess, prerender, reasoning_intent, report

TEMPLATES: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "probe_templates.json").read_text("utf-8"))
USER = [{"role": "user", "content": "Hi"}]
TOGGLE = ChatTemplate(TEMPLATES["reasoning_field_toggle"]["template"])
EFFORT = ChatTemplate(TEMPLATES["effort_enum"]["template"])
BUDGET = ChatTemplate(TEMPLATES["budget_and_history_switch"]["template"])


def test_a_plain_body_renders_as_render_does() -> None:
    body = {"model": "m", "messages": USER, "temperature": 0.2, "stream": True}
    prompt, result = prerender(body, TOGGLE)
    assert prompt == TOGGLE.render(USER).prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert result.reasoning.mechanism == "default"


@pytest.mark.parametrize(
    ("fields", "intent", "notes"),
    [
        ({"reasoning_effort": "none"}, "off", ()),
        ({"reasoning_effort": "low"}, "low", ()),
        ({"reasoning_effort": "minimal"}, "low", ("reasoning_effort='minimal' has no tier of its own; sent as 'low'",)),
        ({"reasoning_effort": "xhigh"}, "high", ("reasoning_effort='xhigh' has no tier of its own; sent as 'high'",)),
        ({"reasoning": {"effort": "medium"}}, "medium", ()),
        ({"reasoning": {"summary": "auto"}}, None, ()),
        ({"thinking": {"type": "disabled"}}, "off", ()),
        ({"thinking": {"type": "enabled"}}, "on", ()),
        ({"thinking": {"type": "enabled", "budget_tokens": 3000}}, 3000, ()),
        ({"reasoning_effort": None}, None, ()),
    ],
)
def test_each_spelling_of_the_intent(fields: dict[str, Any], intent: Any, notes: tuple[str, ...]) -> None:
    assert reasoning_intent(fields) == (intent, notes)


def test_reasoning_effort_none_closes_a_toggle_template() -> None:
    prompt, result = prerender({"messages": USER, "reasoning_effort": "none"}, TOGGLE)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert result.reasoning.emitted == {"enable_thinking": False}


def test_an_approximate_effort_is_a_warning() -> None:
    prompt, result = prerender({"messages": USER, "reasoning_effort": "xhigh"}, EFFORT)
    assert prompt.startswith("<|system|>Reasoning: high\n")
    assert result.warnings == ("reasoning_effort='xhigh' has no tier of its own; sent as 'high'",)


def test_a_thinking_budget_reaches_a_budget_kwarg() -> None:
    prompt, result = prerender({"messages": USER, "thinking": {"type": "enabled", "budget_tokens": 3000}}, BUDGET)
    assert prompt == "<user>Hi\n<budget>3000</budget><assistant>"
    assert result.reasoning.emitted == {"thinking_budget": 3000}


def test_chat_template_kwargs_win_over_the_intent() -> None:
    body = {"messages": USER, "reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}}
    prompt, result = prerender(body, TOGGLE)
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert result.reasoning.mechanism == "template_args"
    assert result.template_kwargs["enable_thinking"] is True


def test_tools_and_vllm_flags_pass_through() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    messages = [*USER, {"role": "assistant", "content": "Hel"}]
    body = {"messages": messages, "tools": tools, "add_generation_prompt": False, "continue_final_message": True}
    prompt, result = prerender(body, TOGGLE)
    assert (
        prompt == TOGGLE.render(messages, tools=tools, add_generation_prompt=False, continue_final_message=True).prompt
    )
    assert prompt.endswith("<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHel")
    assert [record.to_dict() for record in result.applied] == [
        {"polyfill": "tools", "detail": "1 tool definition(s) described in the system turn"}
    ]


@pytest.mark.parametrize(
    ("body", "message", "field"),
    [
        ([], "the request body must be a JSON object, got list", "request"),
        ({"messages": "Hi"}, "request.messages must be a list, got str", "messages"),
        ({"messages": USER, "reasoning_effort": "max"}, "request.reasoning_effort must be one of ", "reasoning_effort"),
        (
            {"messages": USER, "reasoning_effort": "low", "thinking": {"type": "disabled"}},
            "request sets reasoning_effort and thinking; give at most one",
            "thinking",
        ),
        ({"messages": USER, "reasoning": "low"}, 'request.reasoning must be an object like {"effort"', "reasoning"),
        ({"messages": USER, "thinking": {"type": "on"}}, 'request.thinking must be {"type": "enabled"', "thinking"),
        (
            {"messages": USER, "thinking": {"type": "enabled", "budget_tokens": -1}},
            "request.thinking.budget_tokens must be an integer >= 0, got -1",
            "thinking",
        ),
        ({"messages": USER, "chat_template_kwargs": []}, "request.chat_template_kwargs must be an object", None),
        ({"messages": USER, "add_generation_prompt": "yes"}, "request.add_generation_prompt must be true or", None),
    ],
)
def test_bad_fields_are_input_errors_naming_the_field(body: Any, message: str, field: str | None) -> None:
    with pytest.raises(InputError) as caught:
        prerender(body, TOGGLE)
    assert str(caught.value).startswith(message)
    if field is not None:
        assert caught.value.field == field


def test_a_bad_message_names_its_index() -> None:
    with pytest.raises(InputError, match=r"^messages\[1\]"):
        prerender({"messages": [*USER, {"role": "robot", "content": "x"}]}, TOGGLE)


# --- the reply side: postprocess and PostStream -----------------------------------------------------------------

REPLY = "<think>\nAdd.\n</think>\n\nFour.<|im_end|>"
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}


def test_postprocess_gives_openais_first_choice() -> None:
    _, result = prerender({"messages": USER}, TOGGLE)
    assert postprocess(REPLY, result) == {
        "index": 0,
        "message": {"role": "assistant", "content": "Four.", "reasoning_content": "Add."},
        "finish_reason": "stop",
    }
    assert postprocess("<think>\nAdd", result, finish_reason="length") == {
        "index": 0,
        "message": {"role": "assistant", "content": "", "reasoning_content": "Add"},
        "finish_reason": "length",
    }


def test_postprocess_raw_keeps_the_reasoning_in_the_content() -> None:
    _, result = prerender({"messages": USER}, TOGGLE)
    assert postprocess(REPLY, result, raw=True)["message"] == {
        "role": "assistant",
        "content": "<think>\nAdd.\n</think>\n\nFour.",
    }


@pytest.mark.parametrize(
    ("reply", "server", "expected"),
    [
        (
            Reply("", tool_calls=(CALL,)),
            "stop",
            {"message": {"role": "assistant", "content": None}, "reason": "tool_calls"},
        ),
        (
            Reply("Sure.", tool_calls=(CALL,)),
            "stop",
            {"message": {"role": "assistant", "content": "Sure."}, "reason": "tool_calls"},
        ),
        (
            Reply("", tool_calls=(CALL,)),
            "length",
            {"message": {"role": "assistant", "content": None}, "reason": "length"},
        ),
        (Reply("Sure."), "stop", {"message": {"role": "assistant", "content": "Sure."}, "reason": "stop"}),
    ],
)
def test_a_reply_with_tool_calls_finishes_with_tool_calls(reply: Reply, server: str, expected: dict[str, Any]) -> None:
    calls = {"tool_calls": [CALL]} if reply.tool_calls else {}
    assert choice(reply, finish_reason=server) == {
        "index": 0,
        "message": {**expected["message"], **calls},
        "finish_reason": expected["reason"],
    }


def test_post_stream_gives_chunk_deltas() -> None:
    _, result = prerender({"messages": USER}, TOGGLE)
    stream = PostStream(result)
    pieces = ["<thi", "nk>\nAd", "d.\n</th", "ink>\n\nFo", "ur.<|im_", "end|>"]
    deltas = [stream.feed(piece) for piece in pieces]
    assert stream.initial == [{"role": "assistant", "content": ""}]
    assert deltas == [
        [],
        [{"reasoning_content": "Ad"}],
        [{"reasoning_content": "d."}],
        [{"content": "Fo"}],
        [{"content": "ur."}],
        [],
    ]
    assert stream.close() == []
    assert stream.finish_reason() == "stop"
    assert stream.reply == Reply("Four.", "Add.")


def test_post_stream_starts_with_a_prefilled_answer() -> None:
    body = {
        "messages": [*USER, {"role": "assistant", "content": "Sure,"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    _, result = prerender(body, TOGGLE)
    stream = PostStream(result)
    assert stream.initial == [{"role": "assistant", "content": ""}, {"content": "Sure,"}]
    assert stream.feed(" four.<|im_end|>") == [{"content": " four."}]
    assert stream.close() == []
    assert stream.reply == Reply("Sure, four.")


def test_report_is_what_the_render_changed_and_how_the_reply_was_read() -> None:
    _, result = prerender({"messages": USER, "reasoning_effort": "xhigh"}, TOGGLE)
    assert report(result, result.parse_reply("<think>\nAdd")) == {
        "applied": [],
        "reasoning": {
            "intent": "high",
            "mechanism": "kwarg",
            "emitted": {"enable_thinking": True},
            "exact": False,
            "note": "no effort levels; reasoning turned on",
        },
        "unused_template_args": [],
        "warnings": ["reasoning_effort='xhigh' has no tier of its own; sent as 'high'"],
        "reply": {
            "finish": "in_reasoning",
            "warnings": ["the reply ended inside the reasoning block: no end marker '</think>'"],
        },
    }
