"""`chatcaps serve --upstream` under load: 64 concurrent streams against a real llama-server with the tiny GGUF,
half of the clients speaking OpenAI's chat completions and half Anthropic's Messages API, a quarter of each leaving
mid-stream, bounded in time (about 10 s on 2 busy cores; `LIMIT_S` at most).

What must hold: nothing hangs (the whole run finishes under the limit); every stream a client read to its end is
well-formed to its API's own pydantic types (OpenAI's: each event a `ChatCompletionChunk`, the role first, the finish
reason last, then `[DONE]`; Anthropic's: each event a `RawMessageStreamEvent`, `message_start` first, then blocks
opened, filled and stopped one at a time with dense indices, `message_delta` with `end_turn`, `message_stop` last, no
`[DONE]`) and is the trained reply; every client that left cancelled its generation upstream
(llama-server logs one cancelled task per departure, and every slot is idle within seconds, though each of those
requests asked for 8000 tokens, which the tiny model, told its context is 8192, takes about 50 s to write); no
stream's state survives it, on either API (both read the reply with a `ReplyStream` and answer with an
`EventSourceResponse`: none alive once garbage is collected); and no
connection is left open: none to chatcaps once the clients are gone, and no more to llama-server than the
transport's keep-alive pool keeps (idle; one that llama-server closed after its keep-alive timeout stays half-closed
until httpx next looks at its pool, and is dropped then).
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from anthropic.types import RawMessageStreamEvent
from llama_server_harness import LlamaServerMissing, RunningServer, start_llama_server
from openai.types.chat import ChatCompletionChunk
from pydantic import TypeAdapter
from serve_harness import serving
from sse_starlette import EventSourceResponse
from tiny_model import tiny_gguf

from chatcaps.integrations.llama_server import LlamaServerClient
from chatcaps.reply import ReplyStream
from chatcaps.serve.app import create_app
from chatcaps.serve.upstream import UpstreamBackend

CLIENTS = 64
ROUNDS = 2
"""Streams per client, one after the other."""
LEAVING = 4
"""Every LEAVING-th client leaves its first stream after its first events."""
LIMIT_S = 120.0
SLOTS = 4
KEEP_ALIVE = 20
"""httpx's default keep-alive pool (`max_keepalive_connections`), which the async transport uses."""
HELLO: list[Any] = [{"role": "user", "content": "Hi there!"}]
READ = {"messages": HELLO, "stream": True, "max_tokens": 64, "temperature": 0.0, "seed": 0}
SLOT_CONTEXT = 8192
LONG = {**READ, "max_tokens": 8000, "grammar": 'root ::= a a a a a a a a\na ::= "a"{1000}'}
"""What a leaving client asks for: 8000 tokens, forced by a grammar (GBNF caps one repetition's count), about 50 s of
generation on its own: a slot that is idle within seconds of the load was stopped."""


def read_chat(payloads: list[str]) -> tuple[str, str]:
    """A chat-completions stream's `data:` payloads, checked (raising on anything malformed): its reasoning and
    content."""
    assert payloads[-1] == "[DONE]", payloads[-3:]
    chunks = [ChatCompletionChunk.model_validate(json.loads(payload), strict=True) for payload in payloads[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [chunk.choices[0].finish_reason for chunk in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    deltas = [chunk.model_dump(exclude_unset=True)["choices"][0]["delta"] for chunk in chunks]
    reasoning = "".join(delta.get("reasoning_content", "") for delta in deltas)
    return reasoning, "".join(delta.get("content") or "" for delta in deltas)


ANTHROPIC_EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
DELTA_TEXT = {"thinking_delta": ("thinking", 0), "text_delta": ("text", 1)}
"""Where each text delta's text is, and which of (reasoning, content) it adds to."""


def read_messages(payloads: list[str]) -> tuple[str, str]:
    """A Messages stream's `data:` payloads, checked (raising on anything malformed): its thinking and text."""
    data = [json.loads(payload) for payload in payloads]
    events = [ANTHROPIC_EVENTS.validate_python(event, strict=True) for event in data if event["type"] != "ping"]
    kinds = [event.type for event in events]
    assert (kinds[0], kinds[-2:]) == ("message_start", ["message_delta", "message_stop"]), kinds
    texts = ["", ""]
    open_at, stopped = None, 0
    for event in events[1:-2]:
        if event.type == "content_block_start":
            assert (open_at, event.index) == (None, stopped), (open_at, event)
            open_at = event.index
        elif event.type == "content_block_stop":
            assert event.index == open_at, (open_at, event)
            open_at, stopped = None, stopped + 1
        elif event.type == "content_block_delta":
            assert event.index == open_at, (open_at, event)
            if event.delta.type in DELTA_TEXT:
                key, at = DELTA_TEXT[event.delta.type]
                texts[at] += getattr(event.delta, key)
    assert open_at is None and events[-2].delta.stop_reason == "end_turn", events[-2]
    return texts[0], texts[1]


@dataclass(frozen=True)
class Api:
    """One API the clients speak: where they post, a request read to its end and one left, and how a stream's
    `data:` payloads are checked and read into (reasoning, content)."""

    path: str
    short: dict[str, Any]
    long: dict[str, Any]
    read: Callable[[list[str]], tuple[str, str]]


MESSAGES = {key: value for key, value in READ.items() if key != "seed"}
"""The same request as Anthropic's (which has no `seed`; greedy is enough)."""
MESSAGES_LONG = {key: value for key, value in LONG.items() if key != "seed"}
APIS = (
    Api("/v1/chat/completions", READ, LONG, read_chat),
    Api("/v1/messages", MESSAGES, MESSAGES_LONG, read_messages),
)
"""The APIs the clients take turns with (client i speaks APIS[i % len(APIS)])."""
TRAINED = "The user greets me.", "Hello! How can I help?"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("load") / "server.log"
    try:
        server = start_llama_server(
            tiny_gguf(),
            log=log,
            ctx_size=SLOT_CONTEXT * SLOTS,
            extra_args=["--parallel", str(SLOTS), "--override-kv", f"qwen2.context_length=int:{SLOT_CONTEXT}"],
        )
    except LlamaServerMissing as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


OPEN = {"01": "established", "08": "close-wait"}
"""The TCP states of a connection still open (/proc/net/tcp's hex)."""


def _open(port: int) -> list[str]:
    """The state of every open loopback TCP connection with `port` at either end, seen from both ends."""
    states = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if state in OPEN and port in (int(local.split(":")[1], 16), int(remote.split(":")[1], 16)):
            states.append(OPEN[state])
    return states


async def _client(index: int, base: str, http: httpx.AsyncClient) -> list[tuple[str, str] | None]:
    """One client's streams: the reasoning and content of each read to the end, None for one it left."""
    api = APIS[index % len(APIS)]
    done = []
    for round_ in range(ROUNDS):
        leaves = round_ == 0 and index // len(APIS) % LEAVING == 0
        async with http.stream("POST", f"{base}{api.path}", json=api.long if leaves else api.short) as response:
            assert response.status_code == 200, await response.aread()
            payloads = []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    payloads.append(line.removeprefix("data: "))
                if leaves and len(payloads) == 3:
                    break  # leaving the block closes the connection mid-stream
        done.append(None if leaves else api.read(payloads))
    return done


async def _load(base: str) -> list[tuple[str, str] | None]:
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=0)  # each stream its own connection
    async with httpx.AsyncClient(timeout=LIMIT_S, limits=limits) as http:
        results = await asyncio.wait_for(
            asyncio.gather(*(_client(index, base, http) for index in range(CLIENTS))), LIMIT_S
        )
    return [stream for client in results for stream in client]


def _alive(*kinds: type) -> list[object]:
    """The objects of exactly these `kinds` still alive once garbage is collected: a stream's reader or response kept
    past its request is a leak. (By `type`, not `isinstance`, which asks every object its `__class__`: torch's
    deprecated module attributes warn when asked.)"""
    gc.collect()
    return [found for found in gc.get_objects() if type(found) in kinds]


def _settled(check: Any, timeout_s: float = 10.0) -> Any:
    """`check()`'s value once it is true, polled; its last value when `timeout_s` runs out."""
    deadline = time.monotonic() + timeout_s
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def test_64_concurrent_streams_some_leaving(upstream: RunningServer) -> None:
    llama_port = int(upstream.url.rsplit(":", 1)[1])
    with serving(create_app(UpstreamBackend(LlamaServerClient(upstream.url)))) as base:
        port = int(base.rsplit(":", 1)[1])
        assert _open(port) == []
        started = time.monotonic()
        streams = asyncio.run(_load(base))
        took = time.monotonic() - started
        idle = _settled(lambda: not any(slot["is_processing"] for slot in httpx.get(f"{upstream.url}/slots").json()))
        to_chatcaps = _settled(lambda: _open(port) == [])
        to_llama = _open(llama_port)
        kept = _settled(lambda: not _alive(ReplyStream, EventSourceResponse))
    left = CLIENTS // LEAVING
    assert streams.count(None) == left
    assert streams.count(TRAINED) == CLIENTS * ROUNDS - left
    assert took < LIMIT_S
    assert (idle, to_chatcaps, kept) == (True, True, True)
    assert len(to_llama) <= 2 * KEEP_ALIVE, to_llama  # both ends of each
    log = upstream.log.read_text("utf-8", errors="replace")
    assert log.count("cancel task") == left
