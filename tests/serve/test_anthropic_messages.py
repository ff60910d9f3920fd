"""`chatcaps serve`'s Anthropic Messages API on loopback: the official `anthropic` client (`messages.create`,
`messages.stream(...).get_final_message()`, `messages.count_tokens`) against the app over the tiny trained
transformers model (`--model`): thinking on, off and with a budget, thinking blocks sent back with their signature,
a tool_use -> tool_result round trip, stop sequences, Claude Code's billing line, `--reasoning hide` on both APIs,
every error case in Anthropic's shape. Every response and event is checked against the `anthropic` package's own
pydantic types on its way out (tests/serve_harness.py). The same over a real llama-server is
tests/serve/test_anthropic_llama_server.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import anthropic
import httpx
import pytest
from openai import OpenAI
from serve_harness import Canned, chunks_of, serving

from chatcaps import ChatTemplate
from chatcaps.errors import ServerError
from chatcaps.serve.app import create_app
from chatcaps.serve.local import LocalBackend
from chatcaps.serve.request import GenerationEnd, Sampling

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

HELLO: list[Any] = [{"role": "user", "content": "Hi there!"}]
MAX_BODY = 64 * 1024
THOUGHT = "The user greets me."
ANSWER = "Hello! How can I help?"
DEFAULT_REASONING = {"intent": None, "mechanism": "default", "emitted": None, "exact": True, "note": "template default"}
OFF_REASONING = {
    "intent": "off",
    "mechanism": "kwarg",
    "emitted": {"enable_thinking": False},
    "exact": True,
    "note": "",
}
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _report(reasoning: dict[str, Any] = DEFAULT_REASONING, warnings: list[str] | None = None) -> dict[str, Any]:
    return {
        "applied": [],
        "reasoning": reasoning,
        "unused_template_args": [],
        "warnings": warnings or [],
        "reply": {"finish": "complete", "warnings": []},
    }


@pytest.fixture(scope="module")
def backend(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> LocalBackend:
    return LocalBackend(model, tokenizer, name="tiny")


@pytest.fixture(scope="module")
def url(backend: LocalBackend) -> Iterator[str]:
    with serving(create_app(backend, max_body_bytes=MAX_BODY)) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)


def _dump(message: anthropic.types.Message) -> dict[str, Any]:
    data = message.model_dump(exclude_none=True)
    data["id"] = "msg_*"
    for block in data["content"]:
        if block["type"] == "thinking":
            block["signature"] = "*"
    return data


def test_create(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="tiny", max_tokens=64, messages=HELLO)
    assert message.content[0].type == "thinking"
    assert message.content[0].signature.startswith("chatcaps1.")
    assert _dump(message) == {
        "id": "msg_*",
        "type": "message",
        "role": "assistant",
        "model": "tiny",
        "content": [
            {"type": "thinking", "thinking": THOUGHT, "signature": "*"},
            {"type": "text", "text": ANSWER},
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 11, "output_tokens": 19},
        "chatcaps": _report(),
    }


def test_thinking_disabled_and_a_budget(client: anthropic.Anthropic) -> None:
    off = client.messages.create(model="tiny", max_tokens=64, messages=HELLO, thinking={"type": "disabled"})
    assert [block.model_dump(exclude_none=True) for block in off.content] == [{"type": "text", "text": ANSWER}]
    assert (off.usage.input_tokens, off.usage.output_tokens) == (17, 8)
    assert off.model_dump()["chatcaps"]["reasoning"] == OFF_REASONING
    budget = client.messages.create(
        model="tiny", max_tokens=64, messages=HELLO, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    assert [block.type for block in budget.content] == ["thinking", "text"]
    assert budget.model_dump()["chatcaps"]["reasoning"] == {
        "intent": 1024,
        "mechanism": "kwarg",
        "emitted": {"enable_thinking": True},
        "exact": False,
        "note": "no budget or effort control; a budget of 1024 can only turn reasoning on",
    }


def _events(url: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The stream's events as (name, data), read as they come."""
    with httpx.stream("POST", f"{url}/v1/messages", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line and not line.startswith(":")]
    assert "data: [DONE]" not in lines
    names, data = lines[0::2], lines[1::2]
    return [
        (name.removeprefix("event: "), json.loads(item.removeprefix("data: ")))
        for name, item in zip(names, data, strict=True)
    ]


def test_the_stream_events(url: str) -> None:
    """One block open at a time, dense indices in arrival order, the signature before the thinking block stops."""
    events = _events(url, {"model": "tiny", "max_tokens": 64, "messages": HELLO, "stream": True})
    shape = []
    for name, data in events:
        delta = data.get("delta", {}).get("type", "")
        block = data.get("content_block", {}).get("type", "")
        shape.append(" ".join(part for part in (name, str(data.get("index", "")), block, delta) if part))
    merged = {
        kind: "".join(data["delta"].get(kind, "") for name, data in events if name == "content_block_delta")
        for kind in ("thinking", "text")
    }
    assert merged == {"thinking": THOUGHT, "text": ANSWER}
    collapsed = [item for at, item in enumerate(shape) if at == 0 or item != shape[at - 1]]
    assert collapsed == [
        "message_start",
        "content_block_start 0 thinking",
        "content_block_delta 0 thinking_delta",
        "content_block_delta 0 signature_delta",
        "content_block_stop 0",
        "content_block_start 1 text",
        "content_block_delta 1 text_delta",
        "content_block_stop 1",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"] == {"input_tokens": 11, "output_tokens": 0}
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"input_tokens": 11, "output_tokens": 19},
        "chatcaps": _report(),
    }


def test_stream_get_final_message_is_create(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model="tiny", max_tokens=64, messages=HELLO) as stream:
        final = stream.get_final_message()
    whole = client.messages.create(model="tiny", max_tokens=64, messages=HELLO)
    fields = {"type", "thinking", "signature", "text"}
    assert [block.model_dump(include=fields) for block in final.content] == [
        block.model_dump(include=fields) for block in whole.content
    ]  # the same text, so the same signature
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == ("end_turn", 11, 19)


def test_count_tokens_is_the_prompts(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model="tiny", messages=HELLO)
    off = client.messages.count_tokens(model="tiny", messages=HELLO, thinking={"type": "disabled"})
    assert (counted.input_tokens, off.input_tokens) == (11, 17)  # as `usage.input_tokens` of the same requests


def test_thinking_sent_back_with_its_signature(client: anthropic.Anthropic) -> None:
    first = client.messages.create(model="tiny", max_tokens=64, messages=HELLO)
    turns: list[Any] = [
        *HELLO,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    again = client.messages.create(model="tiny", max_tokens=64, messages=turns)
    assert again.model_dump()["chatcaps"]["warnings"] == []
    turns[1]["content"][0]["thinking"] = "Edited."
    edited = client.messages.create(model="tiny", max_tokens=64, messages=turns)
    assert edited.model_dump()["chatcaps"]["warnings"] == [
        "messages[1].content[0]: the thinking block's signature does not verify (not this server's, or its text "
        "changed); rendered anyway"
    ]


def test_a_tool_use_and_its_result(client: anthropic.Anthropic, url: str) -> None:
    """The tool_use and its tool_result reach the template (the tiny model was not trained on tools: its answer is
    whatever it makes of them); redacted thinking is dropped and reported."""
    turns: list[Any] = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny, 21 C"}]},
    ]
    reply = client.messages.create(model="tiny", max_tokens=24, messages=turns, tools=[WEATHER])
    assert reply.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert reply.model_dump()["chatcaps"]["warnings"] == [
        "messages[1].content[0]: redacted_thinking cannot be rendered; dropped"
    ]
    without = client.messages.count_tokens(model="tiny", messages=turns[:1], tools=[WEATHER])
    counted = client.messages.count_tokens(model="tiny", messages=turns, tools=[WEATHER])
    assert reply.usage.input_tokens == counted.input_tokens > without.input_tokens + 20


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tool_choice_any_is_kept_by_a_grammar(client: anthropic.Anthropic, stream: bool) -> None:
    """`any` on a template that does not read `tool_choice`: the backend's grammar (llguidance on `--model`) keeps
    the untrained model to the template's call format, so the reply is a tool_use of a declared tool whose input fits
    its schema, and the report names the grammar."""
    city = {"type": "string", "enum": ["Paris", "Oslo"]}  # a free string: the untrained model would ramble in it
    tool = {**WEATHER, "input_schema": {**WEATHER["input_schema"], "properties": {"city": city}}}
    fields: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 120,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [tool],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "disabled"},
    }
    if stream:
        with client.messages.stream(**fields) as events:
            called = events.get_final_message()
    else:
        called = client.messages.create(**fields)
    uses = [block for block in called.content if block.type == "tool_use"]
    assert [use.name for use in uses] == ["get_weather"]
    assert called.stop_reason == "tool_use"
    assert uses[0].input in ({"city": "Paris"}, {"city": "Oslo"})
    if not stream:  # the SDK's final message of a stream keeps no extra field
        report = called.model_dump()["chatcaps"]
        assert (report["grammar"], report["backend"], report["warnings"]) == ("required", "llguidance", [])


def test_tool_choice_any_is_refused_where_nothing_applies_a_grammar() -> None:
    """A backend that applies no grammar, and a template that does not read `tool_choice`: refused by name, in the
    client's words."""
    with serving(create_app(Canned())) as base:
        response = httpx.post(
            f"{base}/v1/messages", json=_body(tools=[WEATHER], tool_choice={"type": "any"}), timeout=60
        )
    assert (response.status_code, response.json()) == (
        400,
        _error(
            "invalid_request_error",
            "request.tool_choice 'any' cannot be honoured: the template does not read tool_choice and this backend "
            'applies no grammar (send {"type": "auto"} or leave it out)',
        ),
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_stop_sequence(client: anthropic.Anthropic, stream: bool) -> None:
    fields: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 64,
        "messages": HELLO,
        "thinking": {"type": "disabled"},
        "stop_sequences": ["can"],
    }
    if stream:
        with client.messages.stream(**fields) as events:
            reply = events.get_final_message()
    else:
        reply = client.messages.create(**fields)
    assert [block.model_dump(exclude_none=True) for block in reply.content] == [{"type": "text", "text": "Hello! How"}]
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "can")


def test_max_tokens(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model="tiny", max_tokens=5, messages=HELLO)
    assert (reply.stop_reason, reply.usage.output_tokens) == ("max_tokens", 5)
    assert reply.model_dump()["chatcaps"]["reply"]["finish"] == "in_reasoning"


def test_claude_codes_billing_line(client: anthropic.Anthropic) -> None:
    """The per-request `cch=` value is normalised, so two requests render the same prompt (and say so)."""
    counts = []
    for nonce in ("fa690", "0aaa9"):
        line = f"x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch={nonce};"
        reply = client.messages.create(
            model="tiny", max_tokens=64, messages=HELLO, system=[{"type": "text", "text": line}]
        )
        assert reply.model_dump()["chatcaps"]["warnings"] == [
            f"system[0]: Claude Code's billing line: cch={nonce} normalised to cch=00000"
        ]
        counts.append(reply.usage.input_tokens)
    assert counts[0] == counts[1]


def test_a_system_message_among_the_turns(url: str) -> None:
    """Claude Code's reminders as `{"role": "system"}` messages among the turns: answered, the text in the prompt
    (the tiny model's ChatML template renders a later system turn as it is, so nothing is adapted)."""
    messages = [*HELLO, {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}]
    response = httpx.post(f"{url}/v1/messages", json=_body(messages=messages), timeout=60)
    assert (response.status_code, response.json()["chatcaps"]["applied"]) == (200, [])
    counted = [
        httpx.post(f"{url}/v1/messages/count_tokens", json={"model": "tiny", "messages": sent}, timeout=60).json()
        for sent in (HELLO, messages)
    ]
    assert counted[1]["input_tokens"] > counted[0]["input_tokens"]


@pytest.mark.parametrize(
    "headers",
    [
        {"x-api-key": "k", "anthropic-version": "2023-06-01"},
        {"authorization": "Bearer k", "anthropic-version": "2099-01-01", "anthropic-beta": "some-beta-2025-01-01"},
    ],
    ids=["x-api-key", "bearer"],
)
def test_what_claude_code_sends_is_accepted(url: str, headers: dict[str, str]) -> None:
    body = _body(thinking={"type": "disabled"})
    response = httpx.post(f"{url}/v1/messages", json=body, headers=headers, timeout=60)
    assert (response.status_code, response.json()["content"]) == (200, [{"type": "text", "text": ANSWER}])


def test_models_in_anthropics_shape(client: anthropic.Anthropic) -> None:
    listed = client.models.list()
    assert [(model.id, model.type, model.display_name) for model in listed.data] == [("tiny", "model", "tiny")]


# --- errors -------------------------------------------------------------------------------------------------------


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "max_tokens": 64, "messages": HELLO, **fields}


ERRORS: list[tuple[str, str, Any, int, dict[str, Any]]] = [
    (
        "not JSON",
        "/v1/messages",
        b'{"messages": [',
        400,
        _error(
            "invalid_request_error",
            "the request body is not valid JSON: unexpected end of data: line 1 column 15 (char 14)",
        ),
    ),
    (
        "over the limit",
        "/v1/messages",
        b'{"system": "' + b"x" * MAX_BODY + b'"}',
        413,
        _error("request_too_large", f"the request body is over {MAX_BODY} bytes"),
    ),
    (
        "no max_tokens",
        "/v1/messages",
        {"model": "tiny", "messages": HELLO},
        400,
        _error("invalid_request_error", "request.max_tokens is required"),
    ),
    (
        "bad role",
        "/v1/messages",
        _body(messages=[{"role": "robot", "content": "Hi"}]),
        400,
        _error(
            "invalid_request_error",
            "messages[0].role: role must be one of ['user', 'assistant', 'system'], got 'robot'",
        ),
    ),
    (
        "unknown block",
        "/v1/messages",
        _body(messages=[{"role": "user", "content": [{"type": "document"}]}]),
        400,
        _error(
            "invalid_request_error",
            "messages[0].content[0]: a block must be one of ['text', 'image', 'tool_result'], got 'document'",
        ),
    ),
    (
        "a result for no call",
        "/v1/messages/count_tokens",
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}]},
        400,
        _error("invalid_request_error", "messages[0].content[0].tool_use_id: no earlier tool_use has id 'toolu_x'"),
    ),
    (
        "top_k with --model",
        "/v1/messages",
        _body(top_k=5),
        400,
        _error("invalid_request_error", "request.top_k is not supported by chatcaps serve --model"),
    ),
    (
        "bad thinking",
        "/v1/messages",
        _body(thinking={"type": "enabled", "budget_tokens": -1}),
        400,
        _error("invalid_request_error", "request.thinking.budget_tokens must be an integer >= 0, got -1"),
    ),
    (
        "over the context",
        "/v1/messages",
        _body(messages=[{"role": "user", "content": "Hi " * 600}]),
        400,
        _error("invalid_request_error", "the prompt has 1208 tokens; the model's context is 512"),
    ),
    (
        "unknown route",
        "/v1/messages/batches",
        _body(),
        404,
        _error("not_found_error", "POST /v1/messages/batches: Not Found"),
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "expected"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors(url: str, path: str, body: Any, status: int, expected: dict[str, Any]) -> None:
    sent = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(f"{url}{path}", headers={"content-type": "application/json"}, timeout=60, **sent)
    assert (response.status_code, response.json()) == (status, expected)


def test_errors_through_the_client(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model="tiny", max_tokens=64, messages=HELLO, extra_body={"top_k": 5})
    assert raised.value.body == _error(
        "invalid_request_error", "request.top_k is not supported by chatcaps serve --model"
    )
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="tiny", messages=[])


def test_a_render_error_names_the_anthropic_message() -> None:
    """An `InputError` about a canonical message names the Anthropic message it came from (the wire checks what the
    render would, so this is the guard for what it may not)."""
    from chatcaps.errors import InputError
    from chatcaps.request import Origins

    origins = Origins(("system", 0, 1, 1))
    found = origins.located(InputError("no earlier tool call has id 'x'", index=3, field="tool_call_id"))
    assert (str(found), found.index, found.field) == (
        "messages[1].tool_call_id: no earlier tool call has id 'x'",
        1,
        "tool_call_id",
    )
    system = origins.located(InputError("must be a string, got int", index=0, field="content"))
    assert (str(system), system.field) == ("request.system: must be a string, got int", "system")


class _Failing:
    """The tiny model's template, and a generation that writes a little and then fails."""

    model = "failing"
    grammars: str | None = None
    lazy_grammars = False

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend

    def template(self, *, tools: bool) -> ChatTemplate:
        return self.backend.template(tools=tools)

    def check(self, sampling: Sampling) -> None:
        return None

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        yield "<think>\nThe"
        raise ServerError("HTTP 500: gone", url="http://upstream/completion", status=500)

    async def count_tokens(self, text: str) -> int:
        return await self.backend.count_tokens(text)

    async def aclose(self) -> None:
        return None


def test_a_failure_midway(backend: LocalBackend) -> None:
    """Whole: a 502 in Anthropic's shape. Streamed: the open block's deltas so far, then an `error` event."""
    body = _error("api_error", "upstream http://upstream/completion: HTTP 500: gone")
    with serving(create_app(_Failing(backend))) as base:
        whole = httpx.post(f"{base}/v1/messages", json=_body(), timeout=60)
        assert (whole.status_code, whole.json()) == (502, body)
        events = _events(base, _body(stream=True))
    assert [name for name, _ in events] == ["message_start", "content_block_start", "content_block_delta", "error"]
    assert events[2][1]["delta"] == {"type": "thinking_delta", "thinking": "The"}
    assert events[-1][1] == body


TOOLS_JSON = json.dumps(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
)
"""The tools as a template gets them: OpenAI's function tools, `input_schema` as `parameters`."""
NAMED = "{'type': 'function', 'function': {'name': 'get_weather'}}"


class _Echo:
    """A template that shows what it was given of tools, `tool_choice` and `parallel_tool_calls`, and a generation
    that writes the prompt back: the answer's text is what the template rendered."""

    model = "echo"
    grammars: str | None = None
    lazy_grammars = False
    source = (
        "{% for m in messages %}{{ m.content }}{% endfor %}"
        "{% if tools %}|tools={{ tools | tojson }}{% endif %}"
        "{% if tool_choice %}|choice={{ tool_choice }}{% endif %}"
        "{% if parallel_tool_calls is defined %}|parallel={{ parallel_tool_calls }}{% endif %}"
    )

    def __init__(self) -> None:
        self._template = ChatTemplate.from_str(self.source)

    def template(self, *, tools: bool) -> ChatTemplate:
        return self._template

    def check(self, sampling: Sampling) -> None:
        return None

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        yield prompt
        yield GenerationEnd(len(prompt), len(prompt), "stop")

    async def count_tokens(self, text: str) -> int:
        return len(text)

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(
    ("choice", "rendered"),
    [
        ({"type": "auto"}, f"Hi|tools={TOOLS_JSON}|choice=auto"),
        ({"type": "any"}, f"Hi|tools={TOOLS_JSON}|choice=required"),
        (
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            f"Hi|tools={TOOLS_JSON}|choice={NAMED}|parallel=False",
        ),
        ({"type": "none"}, "Hi"),
    ],
    ids=["auto", "any", "tool", "none"],
)
def test_tool_choice_reaches_a_template_that_reads_it(choice: dict[str, Any], rendered: str) -> None:
    """`any` is OpenAI's "required", a named tool keeps its name, `none` leaves the tools out of the prompt."""
    with serving(create_app(_Echo())) as base:
        body = {"max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER]}
        reply = httpx.post(f"{base}/v1/messages", json={**body, "tool_choice": choice}, timeout=30).json()
    assert reply["content"] == [{"type": "text", "text": rendered}]


def test_disable_parallel_tool_use_where_the_template_cannot_hold_it(client: anthropic.Anthropic) -> None:
    choice: Any = {"type": "auto", "disable_parallel_tool_use": True}
    reply = client.messages.create(model="tiny", max_tokens=4, messages=HELLO, tools=[WEATHER], tool_choice=choice)
    assert reply.model_dump()["chatcaps"]["warnings"] == [
        "tool_choice.disable_parallel_tool_use: the template does not read parallel_tool_calls; not held"
    ]


def test_an_idle_stream_pings_in_anthropics_shape() -> None:
    from chatcaps.serve.anthropic import _ping

    assert _ping().encode() == b'event: ping\ndata: {"type":"ping"}\n\n'


# --- --reasoning hide ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hidden(backend: LocalBackend) -> Iterator[str]:
    with serving(create_app(backend, reasoning="hide")) as base:
        yield base


def test_hide_on_the_messages_api(hidden: str) -> None:
    client = anthropic.Anthropic(base_url=hidden, api_key="unused", max_retries=0)
    reply = client.messages.create(model="tiny", max_tokens=64, messages=HELLO)
    assert [block.model_dump(exclude_none=True) for block in reply.content] == [{"type": "text", "text": ANSWER}]
    assert reply.usage.model_dump(exclude_none=True) == {
        "input_tokens": 11,
        "output_tokens": 19,
        "output_tokens_details": {"thinking_tokens": 5},
    }
    events = _events(hidden, _body(stream=True))
    assert {data.get("content_block", {}).get("type") for _, data in events} == {None, "text"}
    assert THOUGHT not in json.dumps(events)
    assert events[-2][1]["usage"]["output_tokens_details"] == {"thinking_tokens": 5}


def test_hide_on_the_chat_api(hidden: str) -> None:
    client = OpenAI(base_url=f"{hidden}/v1", api_key="unused", max_retries=0)
    whole = client.chat.completions.create(model="tiny", messages=HELLO).model_dump(exclude_unset=True)
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}
    assert whole["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    pieces = client.chat.completions.create(
        model="tiny", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in pieces])
    assert not any("reasoning_content" in chunk for chunk in chunks)
    assert "".join(chunk.get("content", "") for chunk in chunks) == ANSWER
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    refused = httpx.post(
        f"{hidden}/v1/chat/completions", json={"model": "tiny", "messages": HELLO, "reasoning_format": "none"}
    )
    assert (refused.status_code, refused.json()["error"]["message"]) == (
        400,
        "request.reasoning_format 'none' is refused: this server hides reasoning (--reasoning hide)",
    )


def test_the_reasoning_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """`chatcaps serve --reasoning hide` reaches the app (show by default)."""
    from chatcaps import serve
    from chatcaps.cli import main

    seen: list[str] = []
    monkeypatch.setattr(serve, "run", lambda backend, **options: seen.append(options["reasoning"]))
    monkeypatch.setattr(LocalBackend, "from_dir", classmethod(lambda cls, path, **options: None))
    assert main(["serve", "--model", "folder", "--reasoning", "hide"]) == 0
    assert main(["serve", "--model", "folder"]) == 0
    assert seen == ["hide", "show"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_prefilled_answer_is_continued(client: anthropic.Anthropic, stream: bool) -> None:
    """A last assistant message is a prefill: the model continues it, and the answer is the continuation alone (its
    space included: the prefill and the answer join as written)."""
    turns: list[Any] = [*HELLO, {"role": "assistant", "content": "Hello!"}]
    fields: dict[str, Any] = {"model": "tiny", "max_tokens": 64, "messages": turns, "thinking": {"type": "disabled"}}
    if stream:
        with client.messages.stream(**fields) as events:
            reply = events.get_final_message()
    else:
        reply = client.messages.create(**fields)
    assert [block.model_dump(exclude_none=True) for block in reply.content] == [
        {"type": "text", "text": " How can I help?"}
    ]
