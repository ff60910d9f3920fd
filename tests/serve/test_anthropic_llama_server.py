"""`chatcaps serve --upstream`'s Anthropic Messages API over a real llama-server on loopback, the tiny trained GGUF
greedy: the official `anthropic` client's `messages.create`, `messages.stream(...).get_final_message()` and
`messages.count_tokens` (llama-server's `/tokenize`: the count equals the `usage.input_tokens` llama-server reports),
thinking on and off, a stop sequence llama-server stopped at, and a grammar-forced tool_use whose result goes back
in the next turn with the thinking block and its signature. One llama-server and one app for the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from llama_server_harness import LlamaServerMissing, RunningServer, start_llama_server
from serve_harness import serving
from tiny_model import tiny_gguf

from chatcaps.integrations.llama_server import LlamaServerClient
from chatcaps.serve.app import create_app
from chatcaps.serve.upstream import UpstreamBackend

HELLO: list[Any] = [{"role": "user", "content": "Hi there!"}]
GREEDY: dict[str, Any] = {"max_tokens": 64, "extra_body": {"temperature": 0.0}}
"""Greedy: this SDK has no `temperature` argument; the field is Anthropic's, read by the server as sent."""
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL_TEXT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
"""One call as the tiny template writes an assistant's call (tests/data/tiny_model/chat_template.jinja)."""
FORCED_CALL = {"grammar": "root ::= " + json.dumps("<think>\nThe user wants the weather.\n</think>\n\n" + CALL_TEXT)}
"""A GBNF grammar that accepts exactly that text: the tiny model was never trained on tools."""


def _start(model: Path, log: Path) -> RunningServer:
    try:
        return start_llama_server(model, log=log)
    except LlamaServerMissing as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    upstream = _start(tiny_gguf(), tmp_path_factory.mktemp("anthropic-upstream") / "server.log")
    try:
        with serving(create_app(UpstreamBackend(LlamaServerClient(upstream.url)))) as base:
            yield anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    finally:
        upstream.stop()


def _blocks(message: anthropic.types.Message) -> list[dict[str, Any]]:
    return [block.model_dump(include={"type", "thinking", "text", "id", "name", "input"}) for block in message.content]


def test_create_and_count_tokens(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="tiny", messages=HELLO, **GREEDY)
    assert _blocks(message) == [
        {"type": "thinking", "thinking": "The user greets me."},
        {"type": "text", "text": "Hello! How can I help?"},
    ]
    assert (message.stop_reason, message.usage.input_tokens, message.usage.output_tokens) == ("end_turn", 11, 19)
    assert client.messages.count_tokens(model="tiny", messages=HELLO).input_tokens == 11


def test_stream_without_thinking(client: anthropic.Anthropic) -> None:
    off: Any = {"type": "disabled"}
    with client.messages.stream(model="tiny", messages=HELLO, thinking=off, **GREEDY) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_message()
    assert _blocks(final) == [{"type": "text", "text": "Hello! How can I help?"}]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (17, 8)
    assert client.messages.count_tokens(model="tiny", messages=HELLO, thinking=off).input_tokens == 17
    assert types[0] == "message_start" and types[-1] == "message_stop"


def test_a_stop_sequence(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(
        model="tiny", messages=HELLO, thinking={"type": "disabled"}, stop_sequences=["can"], **GREEDY
    )
    assert _blocks(reply) == [{"type": "text", "text": "Hello! How"}]
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "can")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_tool_use_round_trip(client: anthropic.Anthropic, stream: bool) -> None:
    """A forced call comes back as a tool_use block (a fresh `toolu_` id: the template writes none); the assistant
    turn goes back as it came, thinking and signature included, with the tool_result, and renders: the signature
    verifies (no warning) and the prompt holds the call and the result."""
    ask: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    fields: dict[str, Any] = {"model": "tiny", "tools": [WEATHER], **GREEDY}
    fields["extra_body"] = {**GREEDY["extra_body"], **FORCED_CALL}
    fields["max_tokens"] = 200  # room for the forced text (byte-level tokens the tiny model's BPE never merged)
    if stream:
        with client.messages.stream(messages=ask, **fields) as events:
            called = events.get_final_message()
    else:
        called = client.messages.create(messages=ask, **fields)
    call_id = _blocks(called)[-1].get("id", "")
    assert call_id.startswith("toolu_")
    assert _blocks(called) == [
        {"type": "thinking", "thinking": "The user wants the weather."},
        {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert called.stop_reason == "tool_use"
    turns: list[Any] = [
        *ask,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in called.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "Sunny, 21 C"}]},
    ]
    answer = client.messages.create(model="tiny", messages=turns, tools=[WEATHER], **GREEDY)
    assert answer.model_dump()["chatcaps"]["warnings"] == []
    counted = client.messages.count_tokens(model="tiny", messages=turns, tools=[WEATHER])
    assert counted.input_tokens == answer.usage.input_tokens
