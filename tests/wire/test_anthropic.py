"""`chatcaps.wire.anthropic`: a Messages API request read into canonical messages and options (every block kind, the
reasoning fields, tool_choice, the billing line), each bad field named by message index and field, and the
response shapes checked against the `anthropic` package's own pydantic types."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message, MessageTokensCount, ModelInfo, RawMessageStreamEvent
from pydantic import TypeAdapter

from chatcaps.errors import InputError
from chatcaps.request import Origins, Sampling, Signed, ToolChoice
from chatcaps.vocab import Intent
from chatcaps.wire import anthropic

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
OPENAI_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": WEATHER["input_schema"],
    },
}
KEY = b"k" * 32


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], **fields}


def test_a_conversation_with_every_block() -> None:
    body = _body(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        tools=[WEATHER],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need the tool.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "Sunny"}]},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
    )
    read = anthropic.read_request(body)
    assert read.messages == (
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather?"},
                {"type": "image", "url": "data:image/png;base64,AAAA"},
                {"type": "image", "url": "https://x/y.png"},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Need the tool.",
            "tool_calls": [
                {
                    "id": "toolu_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_a", "name": "get_weather", "content": "Sunny"},
        {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]},
    )
    assert read.origins == Origins(("system", 0, 1, 2, 2))
    assert read.tools == (OPENAI_WEATHER,)
    assert read.signed == (Signed("messages[1].content[0]", "Need the tool.", "sig"),)
    assert read.notes == ("messages[1].content[1]: redacted_thinking cannot be rendered; dropped",)
    assert (read.add_generation_prompt, read.continue_final_message) == (True, False)


def test_an_error_result_and_string_content() -> None:
    body = _body(
        messages=[
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "down"}],
            },
        ]
    )
    assert anthropic.read_request(body).messages[-1] == {
        "role": "tool",
        "tool_call_id": "t1",
        "name": "get_weather",
        "content": "Error: down",
    }


def test_a_result_with_an_image() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/shot.png"}}
    body = _body(
        messages=[
            {"role": "user", "content": "Look"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "A"}, image]},
                    {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": [image]},
                ],
            },
        ]
    )
    picture = {"type": "image", "url": "https://x/shot.png"}
    assert anthropic.read_request(body).messages[-2:] == (
        {"role": "tool", "tool_call_id": "t1", "name": "shot", "content": [{"type": "text", "text": "A"}, picture]},
        {
            "role": "tool",
            "tool_call_id": "t1",
            "name": "shot",
            "content": [{"type": "text", "text": "Error:"}, picture],
        },
    )


@pytest.mark.parametrize(
    ("fields", "reasoning", "notes"),
    [
        ({}, None, ()),
        ({"thinking": {"type": "disabled"}}, "off", ()),
        ({"thinking": {"type": "enabled"}}, "on", ()),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, 2048, ()),
        ({"thinking": {"type": "adaptive"}}, "on", ()),
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}, "low", ()),
        (
            {"output_config": {"effort": "max"}},
            "high",
            ("output_config.effort 'max' is past the top tier; sent as 'high'",),
        ),
        ({"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}, "off", ()),
    ],
)
def test_the_reasoning_intent(fields: dict[str, Any], reasoning: Intent, notes: tuple[str, ...]) -> None:
    read = anthropic.read_request(_body(**fields))
    assert (read.reasoning, read.notes) == (reasoning, notes)


@pytest.mark.parametrize(
    ("choice", "canonical", "parallel"),
    [
        ({"type": "auto"}, ToolChoice("auto", "'auto'"), True),
        ({"type": "any"}, ToolChoice("required", "'any'"), True),
        ({"type": "none"}, None, True),
        (
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            ToolChoice({"type": "function", "function": {"name": "get_weather"}}, "'tool'"),
            False,
        ),
    ],
)
def test_tool_choice(choice: dict[str, Any], canonical: ToolChoice | None, parallel: bool) -> None:
    """ "none" renders no tools at all, as Anthropic's API reads it."""
    read = anthropic.read_request(_body(tools=[WEATHER], tool_choice=choice))
    assert (read.tool_choice, read.parallel_calls) == (canonical, parallel)
    assert (read.tools is not None) is (canonical is not None)
    assert read.words == anthropic.WORDS


def test_a_prefill_is_continued() -> None:
    read = anthropic.read_request(
        _body(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "So"}])
    )
    assert read.messages == ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "So"})
    assert (read.add_generation_prompt, read.continue_final_message) == (False, True)


def test_sampling_fields() -> None:
    read = anthropic.read_request(
        _body(stop_sequences=["END"], temperature=0.5, top_p=0.9, top_k=40, stream=True, metadata={"user_id": "u"})
    )
    assert (read.sampling, read.stream) == (
        Sampling(max_tokens=64, temperature=0.5, top_p=0.9, stop=("END",), llama_cpp={"top_k": 40}),
        True,
    )
    count = anthropic.read_request({"messages": [{"role": "user", "content": "Hi"}]}, count_only=True)
    assert count.sampling.max_tokens is None


def test_claude_codes_billing_line_is_normalised() -> None:
    line = "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;"
    read = anthropic.read_request(_body(system=[{"type": "text", "text": line}, {"type": "text", "text": "You are."}]))
    assert read.messages[0]["content"] == (
        "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=00000;\n\nYou are."
    )
    assert read.notes == ("system[0]: Claude Code's billing line: cch=fa690 normalised to cch=00000",)
    same = anthropic.read_request(_body(system="Say cch=fa690; as is."))
    assert (same.messages[0]["content"], same.notes) == ("Say cch=fa690; as is.", ())


BAD: list[tuple[str, dict[str, Any], str, int | None, str]] = [
    ("no max_tokens", {"max_tokens": None}, "request.max_tokens is required", None, "max_tokens"),
    ("no messages", {"messages": []}, "request.messages must be a non-empty list, got []", None, "messages"),
    (
        "bad role",
        {"messages": [{"role": "robot", "content": "x"}]},
        "messages[0].role: role must be one of ['user', 'assistant', 'system'], got 'robot'",
        0,
        "role",
    ),
    (
        "unknown block",
        {"messages": [{"role": "user", "content": [{"type": "audio"}]}]},
        "messages[0].content[0]: a block must be one of ['text', 'image', 'tool_result'], got 'audio'",
        0,
        "content[0]",
    ),
    (
        "a result for no call",
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}]},
        "messages[0].content[0].tool_use_id: no earlier tool_use has id 'nope'",
        0,
        "content[0].tool_use_id",
    ),
    (
        "a result holding audio",
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "a", "content": [{"type": "audio"}]}],
                },
            ]
        },
        "messages[2].content[0].content[0]: a block must be one of ['text', 'image'], got 'audio'",
        2,
        "content[0].content[0]",
    ),
    (
        "input not an object",
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "[]"}]},
            ]
        },
        "messages[1].content[0].input: must be an object, got '[]'",
        1,
        "content[0].input",
    ),
    (
        "bad image",
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
        'messages[0].content[0].source: an image source must be {"type": "base64", "media_type", "data"} or '
        '{"type": "url", "url"}, got {\'type\': \'file\'}',
        0,
        "content[0].source",
    ),
    (
        "bad thinking",
        {"thinking": {"type": "sometimes"}},
        "request.thinking.type must be one of ['enabled', 'disabled', 'adaptive'], got 'sometimes'",
        None,
        "thinking",
    ),
    (
        "unknown named tool",
        {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
        "request.tool_choice.name must be one of ['get_weather'], got 'nope'",
        None,
        "tool_choice",
    ),
    (
        "temperature over 1",
        {"temperature": 1.5},
        "request.temperature must be a number between 0.0 and 1.0, got 1.5",
        None,
        "temperature",
    ),
    (
        "bad system",
        {"system": [{"type": "image"}]},
        'request.system[0] must be {"type": "text", "text": ...}',
        None,
        "system[0]",
    ),
]


@pytest.mark.parametrize(("fields", "message", "index", "field"), [case[1:] for case in BAD], ids=[c[0] for c in BAD])
def test_bad_input_is_named(fields: dict[str, Any], message: str, index: int | None, field: str) -> None:
    with pytest.raises(InputError) as raised:
        anthropic.read_request({key: value for key, value in _body(**fields).items() if value is not None})
    assert (str(raised.value), raised.value.index, raised.value.field) == (message, index, field)


def test_the_signature() -> None:
    signed = anthropic.signature("Think.", KEY)
    assert signed == anthropic.signature("Think.", KEY)
    assert signed.startswith("chatcaps1.")
    assert anthropic.verifies("Think.", signed, KEY)
    assert not anthropic.verifies("Think!", signed, KEY)
    assert not anthropic.verifies("Think.", signed, b"other")
    # Whatever a client sends as a signature is checked, not an error (the fuzz test found a 500 on non-ASCII).
    assert not anthropic.verifies("Think.", "chatcaps1.é\ud800", KEY)
    assert anthropic.verifies("\ud800 é", anthropic.signature("\ud800 é", KEY), KEY)


EVENTS = TypeAdapter(RawMessageStreamEvent)


def test_the_shapes_are_anthropics() -> None:
    blocks = [
        anthropic.thinking_block("Plan.", anthropic.signature("Plan.", KEY)),
        anthropic.text_block("Hi"),
        anthropic.tool_use_block("toolu_1", "get_weather", {"city": "Paris"}),
    ]
    reason = anthropic.stop_reason("stop", called_tools=True, stop_sequence=None)
    whole = anthropic.message(
        ident="msg_1",
        model="m",
        content=blocks,
        stop_reason=reason,
        stop_sequence=None,
        usage=anthropic.usage(5, 7, 2),
        chatcaps={},
    )
    Message.model_validate(whole, strict=True)
    assert whole["stop_reason"] == "tool_use"
    events = [
        anthropic.message_start("msg_1", "m", 5),
        anthropic.block_start(0, anthropic.thinking_block("", "")),
        anthropic.thinking_delta(0, "Plan."),
        anthropic.signature_delta(0, "s"),
        anthropic.block_stop(0),
        anthropic.block_start(1, anthropic.tool_use_block("toolu_1", "f", {})),
        anthropic.input_json_delta(1, '{"a": '),
        anthropic.text_delta(2, "x"),
        anthropic.message_delta("stop_sequence", "END", {"output_tokens": 3}, chatcaps={}),
        anthropic.message_stop(),
    ]
    for event in events:
        EVENTS.validate_python(event, strict=True)
    assert anthropic.ping() == {"type": "ping"}  # not among the SDK's event types: it skips pings
    MessageTokensCount.model_validate(anthropic.token_count(12), strict=True)
    ModelInfo.model_validate(anthropic.model_info("m", 0))
    assert anthropic.model_info("m", 0)["created_at"] == "1970-01-01T00:00:00Z"
    assert anthropic.error("bad", kind="invalid_request_error") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }


@pytest.mark.parametrize(
    ("server", "called", "stop", "reason"),
    [
        ("stop", False, None, "end_turn"),
        ("length", True, None, "max_tokens"),
        ("stop", False, "END", "stop_sequence"),
        ("stop", True, None, "tool_use"),
    ],
)
def test_stop_reason(server: str, called: bool, stop: str | None, reason: str) -> None:
    assert anthropic.stop_reason(server, called_tools=called, stop_sequence=stop) == reason


def test_error_types() -> None:
    assert [anthropic.error_type(status) for status in (400, 401, 404, 413, 500, 502, 503)] == [
        "invalid_request_error",
        "authentication_error",
        "not_found_error",
        "request_too_large",
        "api_error",
        "api_error",
        "overloaded_error",
    ]


def test_a_strict_tool_stays_strict() -> None:
    """Anthropic's `strict: true` (strict tool use) is the function's `strict`, which the grammar keeps to."""
    read = anthropic.read_request(_body(tools=[{**WEATHER, "strict": True}]))
    function: dict[str, Any] = {**WEATHER, "parameters": WEATHER["input_schema"], "strict": True}
    del function["input_schema"]
    assert read.tools == ({"type": "function", "function": function},)


def test_a_system_message_among_the_turns_is_read_as_one() -> None:
    """Claude Code sends reminders as system messages among the turns (Anthropic's own API takes only `system`;
    llama-server takes both): each is a canonical system turn where it stands, its text blocks joined."""
    read = anthropic.read_request(
        _body(
            messages=[
                {"role": "user", "content": "Hi"},
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Now."}],
                },
                {"role": "user", "content": "Go"},
            ]
        )
    )
    assert [dict(message) for message in read.messages] == [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Be brief.\n\nNow."},
        {"role": "user", "content": "Go"},
    ]
    with pytest.raises(InputError) as raised:
        anthropic.read_request(_body(messages=[{"role": "system", "content": [{"type": "image"}]}]))
    assert str(raised.value) == (
        "messages[0].content[0]: a system message's block must be "
        '{"type": "text", "text": ...}, got {\'type\': \'image\'}'
    )
