"""`chatcaps serve --upstream` against a real llama-server on loopback: the official `openai` client over the tiny
trained GGUF (greedy, so the text is known), whole and streamed, with tools and with `reasoning_effort`; an upstream
that fails (502 with its status), one that is down (502), and a client that disconnects mid-stream (llama-server
stops generating).

The server binary comes from scripts/build_llama_server.sh (see tests/llama_server_harness.py); without it these tests
fail, saying how to build it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_server_harness import LlamaServerMissing, RunningServer, start_llama_server, write_random_gguf
from openai import OpenAI
from serve_harness import WEATHER_TOOL, chunks_of, normalised, serving
from tiny_model import TEMPLATE_FILE, tiny_gguf

from chatcaps.integrations.llama_server import LlamaServerClient
from chatcaps.serve.app import create_app
from chatcaps.serve.request import GenerationEnd, Sampling
from chatcaps.serve.upstream import UpstreamBackend
from chatcaps.transport import AsyncLlamaServerTransport, LlamaServerTransport
from chatcaps.zoo import ZooTemplate

HELLO: list[Any] = [{"role": "user", "content": "Hi there!"}]
TOOLS: list[Any] = [WEATHER_TOOL]
GREEDY: dict[str, Any] = {"temperature": 0.0, "seed": 0, "max_tokens": 64}
DEFAULT_REASONING = {"intent": None, "mechanism": "default", "emitted": None, "exact": True, "note": "template default"}
REPORT = {
    "applied": [],
    "reasoning": DEFAULT_REASONING,
    "unused_template_args": [],
    "warnings": [],
    "reply": {"finish": "complete", "warnings": []},
}


def _start(model: Path, log: Path) -> RunningServer:
    try:
        return start_llama_server(model, log=log)
    except LlamaServerMissing as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = _start(tiny_gguf(), tmp_path_factory.mktemp("serve-upstream") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(upstream: RunningServer) -> Iterator[str]:
    with serving(create_app(UpstreamBackend(LlamaServerClient(upstream.url)))) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_completion(client: OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=HELLO, **GREEDY)
    assert normalised(raw.http_response.json()) == {
        "id": "chatcmpl-*",
        "object": "chat.completion",
        "created": "*",
        "model": "tiny.gguf",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello! How can I help?",
                    "reasoning_content": "The user greets me.",
                },
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 19, "total_tokens": 30},
        "chatcaps": REPORT,
    }


def test_stream_with_reasoning_effort(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=HELLO,
        stream=True,
        reasoning_effort="none",
        stream_options={"include_usage": True},
        **GREEDY,
    )
    chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in stream])
    off = {"intent": "off", "mechanism": "kwarg", "emitted": {"enable_thinking": False}, "exact": True, "note": ""}
    assert chunks[0] == {"role": "assistant", "content": ""}
    assert all(set(delta) == {"content"} for delta in chunks[1:-2])
    assert "".join(delta["content"] for delta in chunks[1:-2]) == "Hello! How can I help?"
    assert chunks[-2:] == [
        {"finish_reason": "stop", "chatcaps": {**REPORT, "reasoning": off}},
        {"usage": {"prompt_tokens": 17, "completion_tokens": 8, "total_tokens": 25}},
    ]


def test_stream_reasoning(client: OpenAI) -> None:
    stream = client.chat.completions.create(model="tiny", messages=HELLO, stream=True, **GREEDY)
    chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in stream])
    reasoning = "".join(delta.get("reasoning_content", "") for delta in chunks)
    content = "".join(delta.get("content", "") for delta in chunks)
    assert (reasoning, content) == ("The user greets me.", "Hello! How can I help?")
    assert chunks[-1] == {"finish_reason": "stop", "chatcaps": REPORT}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tools(client: OpenAI, stream: bool) -> None:
    """Tools reach the template; the tiny model was not trained on them, so its text is whatever it makes of them."""
    create = client.chat.completions.create
    if stream:
        pieces = create(model="tiny", messages=HELLO, tools=TOOLS, max_tokens=24, stream=True)
        chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in pieces])
        assert all(set(delta) <= {"content", "reasoning_content", "tool_calls"} for delta in chunks[1:-1])
        last = chunks[-1]
    else:
        completion = create(model="tiny", messages=HELLO, tools=TOOLS, max_tokens=24).model_dump(exclude_unset=True)
        choice = completion["choices"][0]
        assert set(choice["message"]) <= {"role", "content", "reasoning_content", "tool_calls"}
        last = {"finish_reason": choice["finish_reason"], "chatcaps": completion["chatcaps"]}
    assert last["finish_reason"] in ("stop", "length", "tool_calls")
    assert last["chatcaps"]["reasoning"] == DEFAULT_REASONING


def test_max_tokens_is_length(client: OpenAI) -> None:
    completion = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=3, temperature=0.0)
    assert (completion.choices[0].finish_reason, completion.usage and completion.usage.completion_tokens) == (
        "length",
        3,
    )
    assert completion.model_dump()["chatcaps"]["reply"] == {
        "finish": "in_reasoning",
        "warnings": ["the reply ended inside the reasoning block: no end marker '</think>'"],
    }


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_prompt_past_the_context_is_the_clients_400(url: str, stream: bool) -> None:
    """A prompt longer than llama-server's context: it answers 400 `exceed_context_size_error`, the client gets
    OpenAI's 400 `context_length_exceeded` naming it (its request is what must change; other upstream refusals are
    502, `test_a_grammar_llama_server_refuses_is_502_with_its_status`)."""
    long = [{"role": "user", "content": "word " * 2000}]
    response = httpx.post(f"{url}/v1/chat/completions", json={"messages": long, "stream": stream}, timeout=60)
    error = response.json()["error"]
    assert (response.status_code, error["type"], error["code"], error["upstream_status"]) == (
        400,
        "invalid_request_error",
        "context_length_exceeded",
        400,
    )
    assert re.fullmatch(r"upstream http://127\.0\.0\.1:\d+/completion: HTTP 400: .*context.*", error["message"])
    assert httpx.post(f"{url}/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2}).status_code == 200


def test_a_prompt_past_the_context_is_a_400_in_anthropics_shape(url: str) -> None:
    long = [{"role": "user", "content": "word " * 2000}]
    body = {"model": "m", "max_tokens": 8, "messages": long}
    response = httpx.post(f"{url}/v1/messages", json=body, timeout=60)
    assert (response.status_code, response.json()["error"]["type"]) == (400, "invalid_request_error")
    assert "exceeds the available context size (512 tokens)" in response.json()["error"]["message"]


@pytest.mark.parametrize(("adds_bos", "path"), [(False, "/completion"), (True, "/tokenize")])
def test_upstream_down_is_502(tmp_path: Path, adds_bos: bool, path: str) -> None:
    """The server stops after chatcaps read its /props. A model that adds a BOS first needs /tokenize (the template
    here writes none), so that is where the failure shows."""
    template = TEMPLATE_FILE.read_text(encoding="utf-8")
    server = _start(write_random_gguf(tmp_path / "down.gguf", template, add_bos=adds_bos), tmp_path / "server.log")
    backend = UpstreamBackend(LlamaServerClient(server.url))
    server.stop()
    with serving(create_app(backend)) as base:
        for stream in (False, True):
            response = httpx.post(f"{base}/v1/chat/completions", json={"messages": HELLO, "stream": stream})
            assert response.status_code == 502
            error = response.json()["error"]
            assert {key: value for key, value in error.items() if key != "message"} == {
                "type": "upstream_error",
                "param": None,
                "code": "upstream_unreachable",
                "upstream_status": None,
            }
            assert error["message"].startswith(f"upstream {server.url}{path}: the server did not answer: ")
        health = httpx.get(f"{base}/health")
        assert (health.status_code, health.json()["status"], health.json()["upstream"]["state"]) == (
            503,
            "unavailable",
            "unavailable",
        )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_disconnect_stops_the_upstream(tmp_path: Path, stream: bool) -> None:
    """Random weights do not stop on their own: once the client goes, llama-server cancels the task (its log says
    so) and its slot is idle, long before the 900 tokens asked for."""
    template = TEMPLATE_FILE.read_text(encoding="utf-8")
    model = write_random_gguf(tmp_path / "rambling.gguf", template, add_bos=False)
    server = _start(model, tmp_path / "server.log")
    try:
        with serving(create_app(UpstreamBackend(LlamaServerClient(server.url)))) as base:
            body = {"messages": HELLO, "max_tokens": 900, "stream": stream, "temperature": 0.0}
            with httpx.Client(timeout=60) as http:
                if stream:
                    with http.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
                        assert next(response.iter_lines()).startswith("data: ")
                else:
                    with pytest.raises(httpx.ReadTimeout):
                        http.post(f"{base}/v1/chat/completions", json=body, timeout=0.3)
            _wait_until_idle(server.url)
        log = server.log.read_text("utf-8", errors="replace")
    finally:
        server.stop()
    assert "cancel task" in log


def _wait_until_idle(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{url}/slots").json()[0]["is_processing"]:
        assert time.monotonic() < deadline, "llama-server is still generating"
        time.sleep(0.02)


def gbnf(text: str) -> str:
    """A GBNF grammar that accepts exactly `text` (a JSON string literal is a GBNF one)."""
    return "root ::= " + json.dumps(text)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_grammar_reaches_llama_server(client: OpenAI, stream: bool) -> None:
    """llama.cpp's `grammar` is passed through: the model writes the one text it allows, read as usual."""
    forced = {"grammar": gbnf("<think>\nForced.\n</think>\n\nYes, forced.")}
    create = client.chat.completions.create
    if stream:
        pieces = create(model="tiny", messages=HELLO, stream=True, extra_body=forced, **GREEDY)
        chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in pieces])
        merged = {
            field: "".join(chunk.get(field, "") for chunk in chunks) for field in ("reasoning_content", "content")
        }
        assert (merged, chunks[-1]["finish_reason"]) == (
            {"reasoning_content": "Forced.", "content": "Yes, forced."},
            "stop",
        )
    else:
        choice = create(model="tiny", messages=HELLO, extra_body=forced, **GREEDY).model_dump()["choices"][0]
        assert (choice["message"]["reasoning_content"], choice["message"]["content"], choice["finish_reason"]) == (
            "Forced.",
            "Yes, forced.",
            "stop",
        )


def test_a_grammar_llama_server_refuses_is_502_with_its_status(url: str) -> None:
    body = {"messages": HELLO, "grammar": "root ::= nowhere"}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["upstream_status"]) == (502, "upstream_error", 400)
    assert error["message"].endswith("/completion: HTTP 400: Failed to initialize samplers: failed to parse grammar")


WEATHER_IN_PARIS: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL_TEXT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
"""One call as the tiny template writes an assistant's call (tests/data/tiny_model/chat_template.jinja)."""
FORCED_CALL = {"grammar": gbnf("<think>\nThe user wants the weather.\n</think>\n\n" + CALL_TEXT)}
ROOMY = {**GREEDY, "max_tokens": 200}
"""Room for the forced text (byte-level tokens the tiny model's BPE never merged: about 100)."""
PARIS_CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_a_tool_call_forced_by_a_grammar(client: OpenAI) -> None:
    """The tiny model was never trained on tools; a grammar that accepts exactly one call in its template's format
    makes it write one, and the reply side reads it with the call format Caps found by rendering."""
    completion = client.chat.completions.create(
        model="tiny", messages=WEATHER_IN_PARIS, tools=TOOLS, extra_body=FORCED_CALL, **ROOMY
    )
    choice = completion.model_dump(exclude_unset=True)["choices"][0]
    assert choice == {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": None,
            "reasoning_content": "The user wants the weather.",
            "tool_calls": [PARIS_CALL],
        },
        "finish_reason": "tool_calls",
        "logprobs": None,
    }
    assert completion.model_dump()["chatcaps"] == REPORT


def test_a_tool_call_forced_by_a_grammar_streamed(client: OpenAI) -> None:
    """Streamed: reasoning deltas, then the call as one indexed `tool_calls` delta, then finish_reason "tool_calls"."""
    pieces = client.chat.completions.create(
        model="tiny", messages=WEATHER_IN_PARIS, tools=TOOLS, stream=True, extra_body=FORCED_CALL, **ROOMY
    )
    chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in pieces])
    assert chunks[0] == {"role": "assistant", "content": ""}
    assert "".join(chunk.get("reasoning_content", "") for chunk in chunks) == "The user wants the weather."
    assert [chunk for chunk in chunks if "reasoning_content" not in chunk][1:] == [
        {"tool_calls": [{"index": 0, **PARIS_CALL}]},
        {"finish_reason": "tool_calls", "chatcaps": REPORT},
    ]


HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>")
"""gpt-oss's tokens in its markers and content header, as control tokens. llama.cpp makes the first three
user-defined by name when it loads a model (llama-vocab.cpp), so the server writes them anyway; `<|end|>` stays a
control token."""


def test_the_client_and_the_backend_send_one_body_for_a_channel_style_template(
    tmp_path: Path, zoo: tuple[ZooTemplate, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpt-oss's template over a random model with its tokens: `LlamaServerClient.chat_stream` and `UpstreamBackend`
    send the same `/completion` body (its prompt as token ids, the model adding a BOS the template does not write;
    `<|end|>` preserved, the only control token in the markers), and get the same text back."""
    oss = next(template for template in zoo if template.file == "llamacpp__openai-gpt-oss-120b.jinja")
    model = write_random_gguf(tmp_path / "harmony.gguf", oss.read(), control_tokens=HARMONY)
    sent: list[dict[str, Any]] = []
    sync_stream, async_stream = LlamaServerTransport.stream_json, AsyncLlamaServerTransport.stream_json

    def sync_recorded(self: LlamaServerTransport, path: str, body: Mapping[str, Any]) -> Iterator[Any]:
        sent.append(dict(body))
        return sync_stream(self, path, body)

    def async_recorded(self: AsyncLlamaServerTransport, path: str, body: Mapping[str, Any]) -> AsyncIterator[Any]:
        sent.append(dict(body))
        return async_stream(self, path, body)

    monkeypatch.setattr(LlamaServerTransport, "stream_json", sync_recorded)
    monkeypatch.setattr(AsyncLlamaServerTransport, "stream_json", async_recorded)
    server = _start(model, tmp_path / "server.log")
    try:
        client = LlamaServerClient(server.url)
        stream = client.chat_stream(HELLO, n_predict=8, temperature=0.0, seed=0)
        list(stream)
        tokens = client.tokenize(stream.render.prompt)
        sampling = Sampling(max_tokens=8, temperature=0.0, seed=0)
        pieces = asyncio.run(_generated(UpstreamBackend(client), stream.render.prompt, sampling))
    finally:
        server.stop()
    assert client.preserved_tokens == ("<|end|>",)
    assert stream.render.prompt.endswith("<|start|>assistant")
    expected = {"preserved_tokens": ["<|end|>"], "n_predict": 8, "temperature": 0.0, "seed": 0, "prompt": tokens}
    assert sent == [{**expected, "stream": True}] * 2
    assert "".join(piece for piece in pieces if isinstance(piece, str)) == stream.text
    assert pieces[-1] == GenerationEnd(
        len(tokens), stream.completion_tokens, "length" if stream.stop_type == "limit" else "stop"
    )


async def _generated(backend: UpstreamBackend, prompt: str, sampling: Sampling) -> list[str | GenerationEnd]:
    try:
        return [piece async for piece in backend.generate(prompt, sampling)]
    finally:
        await backend.aclose()
