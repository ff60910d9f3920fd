"""The request strategies draw only valid canonical input, and the raw renderer accepts every draw."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings
from strategies import (
    FORBIDDEN_SUBSTRINGS,
    IMAGE_URLS,
    MAX_BUDGET,
    MAX_MESSAGES,
    MAX_TEXT,
    REASONING_TIERS,
    TOOL_NAME_PATTERN,
    conversations,
)

from chatcaps import ChatTemplate

CHATML = ChatTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}")
ROLES = {"system", "developer", "user", "assistant", "tool"}


def _check_text(text: Any) -> None:
    assert isinstance(text, str)
    assert 1 <= len(text) <= MAX_TEXT
    assert text.strip()
    assert not any(marker in text for marker in FORBIDDEN_SUBSTRINGS)


def _check_content(content: Any, *, media: bool) -> None:
    if isinstance(content, str):
        _check_text(content)
        return
    assert isinstance(content, list)
    assert any(block["type"] == "text" for block in content)
    for block in content:
        if block["type"] == "text":
            _check_text(block["text"])
        elif block["type"] == "image":
            assert media and block["url"] in IMAGE_URLS
        else:
            assert media and block["type"] == "image_url" and block["image_url"]["url"] in IMAGE_URLS


def _check_tools(tools: list[dict[str, Any]] | None) -> dict[str, set[str]]:
    """Check the tool list and return each tool's parameter names."""
    if tools is None:
        return {}
    parameters: dict[str, set[str]] = {}
    for tool in tools:
        assert tool["type"] == "function"
        function = tool["function"]
        assert re.fullmatch(TOOL_NAME_PATTERN, function["name"])
        assert function["name"] not in parameters
        _check_text(function["description"])
        schema = function["parameters"]
        assert schema["type"] == "object"
        assert 1 <= len(schema["properties"]) <= 2
        assert all(prop["type"] == "string" for prop in schema["properties"].values())
        assert set(schema["required"]) <= set(schema["properties"])
        parameters[function["name"]] = set(schema["properties"])
    return parameters


def _check_tool_calls(message: dict[str, Any], parameters: dict[str, set[str]]) -> None:
    assert message["content"] is None
    assert 1 <= len(message["tool_calls"]) <= 3
    for call in message["tool_calls"]:
        assert re.fullmatch(r"[A-Za-z0-9]{9}", call["id"])
        assert call["type"] == "function"
        arguments = call["function"]["arguments"]
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        assert isinstance(arguments, dict)
        assert set(arguments) == parameters[call["function"]["name"]]
        for value in arguments.values():
            _check_text(value)


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_conversations_are_valid_canonical_input(example: dict[str, Any]) -> None:
    messages = example["messages"]
    parameters = _check_tools(example["tools"])
    assert len(messages) <= MAX_MESSAGES
    assert all(message["role"] in ROLES for message in messages)
    assert all(message["role"] != "developer" for message in messages[1:])
    first = 1 if messages[0]["role"] in ("system", "developer") else 0
    assert messages[first]["role"] == "user"
    assert messages[-1]["role"] in ("user", "assistant", "tool")

    pending: list[tuple[str, str]] = []  # (id, name) of calls still owed a tool result, in call order
    call_ids: set[str] = set()
    for index, message in enumerate(messages):
        role = message["role"]
        assert not pending or role == "tool", f"message {index}: tool results must follow their calls"
        if role == "tool":
            assert pending, f"message {index}: a tool result without a preceding call"
            assert (message["tool_call_id"], message["name"]) == pending.pop(0)
            _check_text(message["content"])
        elif role == "assistant" and "tool_calls" in message:
            assert parameters, "tool calls need tools"
            _check_tool_calls(message, parameters)
            pending = [(call["id"], call["function"]["name"]) for call in message["tool_calls"]]
            assert call_ids.isdisjoint(call_id for call_id, _ in pending)
            call_ids.update(call_id for call_id, _ in pending)
        else:
            _check_content(message["content"], media=role == "user")
        if role == "system" and index > 0:
            assert messages[index + 1]["role"] == "user"
        if "reasoning_content" in message:
            assert role == "assistant"
            _check_text(message["reasoning_content"])
    assert not pending

    reasoning = example["reasoning"]
    assert (
        reasoning is None or reasoning in REASONING_TIERS or (type(reasoning) is int and 0 <= reasoning <= MAX_BUDGET)
    )
    if example["continue_final_message"]:
        last = messages[-1]
        assert last["role"] == "assistant" and isinstance(last["content"], str) and "tool_calls" not in last
        assert example["add_generation_prompt"] is False

    assert isinstance(CHATML.render_raw(messages, tools=example["tools"]), str)
