"""`chatcaps.wire.openai`: each shape as exact JSON, and each accepted by the `openai` package's own types."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types import ErrorObject, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from chatcaps.errors import InputError
from chatcaps.events import Call, CallArguments, CallEnd, CallStart, Event, Reasoning, Text
from chatcaps.request import ChatRequest, Sampling, ToolChoice
from chatcaps.wire import openai

CALL = openai.tool_call(0, "add", '{"a": 2}')
CHUNKS = openai.Chunks("chatcmpl-1", "tiny", 7)


def test_a_completion() -> None:
    message = openai.assistant_message("", "Add.", [CALL])
    completion = openai.completion(
        ident="chatcmpl-1",
        model="tiny",
        created=7,
        choice=openai.choice(message, openai.finish_reason("stop", called_tools=True)),
        usage=openai.usage(3, 4),
        chatcaps={"warnings": []},
    )
    assert completion == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 7,
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "Add.",
                    "tool_calls": [
                        {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
                    ],
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        "chatcaps": {"warnings": []},
    }
    ChatCompletion.model_validate(completion, strict=True)


@pytest.mark.parametrize(
    ("server", "called_tools", "reported"),
    [("stop", True, "tool_calls"), ("stop", False, "stop"), ("length", True, "length"), ("length", False, "length")],
)
def test_the_finish_reason(server: str, called_tools: bool, reported: str) -> None:
    assert openai.finish_reason(server, called_tools=called_tools) == reported


def test_the_chunks_of_a_stream() -> None:
    chunks = [
        CHUNKS.delta(openai.role_delta()),
        CHUNKS.delta({"reasoning_content": "Add."}),
        CHUNKS.delta(openai.call_delta(0, CALL)),
        CHUNKS.delta(openai.arguments_delta(0, "}")),
        CHUNKS.delta({}, "tool_calls", chatcaps={"warnings": []}),
        CHUNKS.usage(openai.usage(3, 4)),
    ]
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "tiny"}
    assert chunks[0] == {
        **head,
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}
        ],
    }
    assert chunks[2]["choices"][0]["delta"] == {"tool_calls": [{"index": 0, **CALL}]}
    assert chunks[3]["choices"][0]["delta"] == {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}
    assert chunks[4] == {
        **head,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls", "logprobs": None}],
        "chatcaps": {"warnings": []},
    }
    assert chunks[5] == {
        **head,
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk, strict=True)


@pytest.mark.parametrize(
    ("error", "param"),
    [
        (InputError("bad", index=2, field="role"), "messages[2].role"),
        (InputError("bad", index=2), "messages[2]"),
        (InputError("bad", field="tools"), "tools"),
        (InputError("bad"), None),
    ],
)
def test_an_error_body_points_at_the_input(error: InputError, param: str | None) -> None:
    body = openai.error(str(error), kind="invalid_request_error", param=openai.input_param(error), code="invalid_value")
    assert body == {
        "error": {"message": str(error), "type": "invalid_request_error", "param": param, "code": "invalid_value"}
    }
    ErrorObject.model_validate(body["error"], strict=True)


def test_the_model_list() -> None:
    listed = openai.model_list("tiny", 7)
    assert listed == {
        "object": "list",
        "data": [{"id": "tiny", "object": "model", "created": 7, "owned_by": "chatcaps"}],
    }
    Model.model_validate(listed["data"][0], strict=True)


def test_a_completion_id_is_fresh() -> None:
    first, second = openai.completion_id(), openai.completion_id()
    assert first.startswith("chatcmpl-") and len(first) == len("chatcmpl-") + 32 and first != second


def test_events_as_deltas() -> None:
    """One delta per event; a call's id is the model's where it wrote one, else `call_<index>`; a call's end is no
    delta of OpenAI's."""
    call = Call("add", '{"a": 2}')
    events: list[Event] = [
        Reasoning("Add."),
        Text("Sure."),
        CallStart(0, "add"),
        CallArguments(0, '{"a": 2}'),
        CallEnd(0, call),
        CallStart(1, "add", "fc_7", '{"a": 3}'),
    ]
    assert openai.deltas(events) == [
        {"reasoning_content": "Add."},
        {"content": "Sure."},
        {
            "tool_calls": [
                {"index": 0, "id": "call_0", "type": "function", "function": {"name": "add", "arguments": ""}}
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 2}'}}]},
        {
            "tool_calls": [
                {"index": 1, "id": "fc_7", "type": "function", "function": {"name": "add", "arguments": '{"a": 3}'}}
            ]
        },
    ]
    assert openai.calls([call, Call("add", "{}", "fc_7")]) == (CALL, openai.tool_call(1, "add", "{}", "fc_7"))


def test_a_body_read_into_a_chat_request() -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"type": "function", "function": {"name": "add"}}],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "reasoning_effort": "xhigh",
        "max_completion_tokens": 9,
        "stop": "END",
        "top_k": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    read = openai.read_chat(body)
    assert read == ChatRequest(
        messages=body["messages"],
        tools=body["tools"],
        tool_choice=ToolChoice("required", "'required'"),
        parallel_calls=False,
        reasoning="high",
        sampling=Sampling(max_tokens=9, stop=("END",), llama_cpp={"top_k": 4}),
        stream=True,
        include_usage=True,
        notes=("reasoning_effort='xhigh' has no tier of its own; sent as 'high'",),
    )
    assert openai.read_prompt(body) == ChatRequest(
        messages=body["messages"], tools=body["tools"], reasoning="high", notes=read.notes
    )
    assert openai.read_chat({**body, "tools": None}).parallel_calls  # false asks nothing without tools


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", "hot", "request.temperature must be a number, got 'hot'"),
        ("temperature", 3, "request.temperature must be between 0.0 and 2.0, got 3"),
        ("max_tokens", 0, "request.max_tokens must be >= 1, got 0"),
        ("seed", 1.5, "request.seed must be an integer, got 1.5"),
        (
            "stop",
            ["a"] * 5,
            "request.stop must be a string or a list of up to 4 strings, got ['a', 'a', 'a', 'a', 'a']",
        ),
        ("n", 2, "request.n must be 1 (one choice per request), got 2"),
    ],
)
def test_a_bad_field_is_named(field: str, value: object, message: str) -> None:
    with pytest.raises(InputError) as raised:
        openai.read_chat({"messages": [], field: value})
    assert (str(raised.value), raised.value.field) == (message, field)
