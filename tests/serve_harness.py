"""`chatcaps serve` in-process on a free loopback port (uvicorn's `Server` in a thread), and helpers that read its
answers: ids and timestamps blanked, streamed chunks reduced to their deltas. Used by the tests in tests/serve/.

Everything a served app sends (but the playground's HTML page) is checked against the `openai` package's own
pydantic types on its way out (strict: no coercion; extra fields, such as `chatcaps` and `reasoning_content`, allowed
as OpenAI's models allow them): a
`chat.completion` as `ChatCompletion`, each streamed event as `ChatCompletionChunk`, the model list's entries as
`Model` (and as the `anthropic` package's `ModelInfo`), every error body as `ErrorObject`. Under `/v1/messages` the
`anthropic` package's types instead: a `Message`, each streamed event as a `RawMessageStreamEvent` named by its
`event:` line (or a `ping`), a token count as `MessageTokensCount`, every error as Anthropic's `ErrorResponse`. What
fails is kept in `INVALID`, which tests/serve/conftest.py asserts empty after each test. `Canned` is a backend with no
model."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
from anthropic.types import ErrorResponse, Message, MessageTokensCount, ModelInfo, RawMessageStreamEvent
from llama_server_harness import free_port
from openai.types import ErrorObject, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter, ValidationError
from tiny_model import TEMPLATE_FILE

from chatcaps import ChatTemplate
from chatcaps.serve.request import GenerationEnd, Sampling

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


CANNED_REPLY = ("<think>\nThe user", " greets me.\n</think>\n\n", "Hello! How", " can I help?")
"""What `Canned` generates, in pieces: the tiny model's trained reply to a greeting."""


class Canned:
    """A backend with no model: the tiny model's template, and `CANNED_REPLY` for every prompt, at once (for tests
    where the server, not the model, is the point). `prompt_tokens` counts the prompt's characters."""

    model = "canned"
    grammars: str | None = None
    lazy_grammars = False

    def __init__(self) -> None:
        self._template = ChatTemplate.from_str(TEMPLATE_FILE.read_text(encoding="utf-8"), name="tiny.jinja")

    def template(self, *, tools: bool) -> ChatTemplate:
        return self._template

    def check(self, sampling: Sampling) -> None:
        return None

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        for piece in CANNED_REPLY:
            yield piece
        yield GenerationEnd(len(prompt), len(CANNED_REPLY), "stop")

    async def count_tokens(self, text: str) -> int:
        return len(text)

    async def aclose(self) -> None:
        return None


@contextmanager
def serving(app: Any, *, timeout_s: float = 30.0) -> Iterator[str]:
    """Run `app` with uvicorn in a thread until the block ends; yields its base URL. Every response the app sent in
    the block must have been OpenAI's own shape (`Validated`): the block ends in an AssertionError naming those that
    were not."""
    import uvicorn

    INVALID.clear()
    port = free_port()
    config = uvicorn.Config(Validated(app), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)
    found, INVALID[:] = list(INVALID), []
    assert found == [], found


def normalised(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with what changes per response blanked: a `chatcmpl-` id, `created`, `created_at`."""
    shown: dict[str, Any] = {}
    for key, value in data.items():
        if key == "id" and isinstance(value, str) and value.startswith("chatcmpl-"):
            value = "chatcmpl-*"
        elif key in ("created", "created_at"):
            value = "*"
        elif isinstance(value, list):
            value = [normalised(item) if isinstance(item, Mapping) else item for item in value]
        shown[key] = value
    return shown


def chunks_of(chunks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each `chat.completion.chunk` as its delta, plus its finish reason and `chatcaps` report where it has them; the
    usage chunk as `{"usage": ...}`."""
    reduced: list[dict[str, Any]] = []
    for chunk in chunks:
        if not chunk["choices"]:
            reduced.append({"usage": chunk["usage"]})
            continue
        choice = chunk["choices"][0]
        entry = dict(choice["delta"])
        if choice.get("finish_reason") is not None:
            entry["finish_reason"] = choice["finish_reason"]
        if "chatcaps" in chunk:
            entry["chatcaps"] = chunk["chatcaps"]
        reduced.append(entry)
    return reduced


INVALID: list[str] = []
"""What a served app sent that OpenAI's types refuse, one line each (`Validated` appends, the tests' conftest
asserts it empty)."""


class Validated:
    """An ASGI app that passes everything through and checks each response body as it goes out: before the client
    receives a whole body, and each server-sent event before it is sent, so a test that has read a response has had
    it checked."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = f"{scope['method']} {scope['path']}"
        status = 0
        streamed = False
        page = False
        buffer = b""

        async def checked(message: dict[str, Any]) -> None:
            nonlocal status, streamed, page, buffer
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = dict(message.get("headers", []))
                streamed = headers.get(b"content-type", b"").startswith(b"text/event-stream")
                page = headers.get(b"content-type", b"").startswith(b"text/html")  # the playground's page: no API's
            elif message["type"] == "http.response.body" and not page:
                buffer += message.get("body", b"")
                if streamed:
                    *events, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
                    for event in events:
                        check_event(route, event)
                elif not message.get("more_body", False):
                    check_body(route, status, buffer)
            await send(message)

        await self.app(scope, receive, checked)


def check_body(route: str, status: int, body: bytes) -> None:
    """A whole response: an error object, a completion, or the model list."""
    try:
        data: Any = orjson.loads(body) if body else None
        if route == "GET /health":
            assert (status, data["status"]) in ((200, "ok"), (503, "unavailable")), data
        elif _anthropic(route) and body:
            _check_anthropic_body(route, status, data)
        elif status >= 400 and body:
            check_error(route, data)
        elif route == "POST /v1/chat/completions" and status == 200:
            ChatCompletion.model_validate(data, strict=True)
        elif route == "GET /v1/models":
            assert data["object"] == "list", data
            for model in data["data"]:
                Model.model_validate(model, strict=True)
                ModelInfo.model_validate(model)
    except (AssertionError, ValidationError, orjson.JSONDecodeError) as error:
        INVALID.append(f"{route} {status}: {error}")


def check_event(route: str, event: bytes) -> None:
    """One server-sent event: `data: [DONE]`, a chunk, or the error that ends a stream; comment lines (pings) are
    skipped."""
    lines = [line for line in event.decode().split("\n") if line and not line.startswith(":")]
    if not lines:
        return
    if _anthropic(route):
        _check_anthropic_event(route, event, lines)
        return
    try:
        assert all(line.startswith("data: ") for line in lines), lines
        data = "\n".join(line.removeprefix("data: ") for line in lines)
        if data == "[DONE]":
            return
        parsed = orjson.loads(data)
        if "error" in parsed:
            check_error(route, parsed)
        else:
            ChatCompletionChunk.model_validate(parsed, strict=True)
    except (AssertionError, ValidationError, orjson.JSONDecodeError) as error:
        INVALID.append(f"{route} event {event!r}: {error}")


ANTHROPIC_PATHS = "/v1/messages"
"""Where errors are Anthropic's shape; everywhere else, OpenAI's."""
ANTHROPIC_DOCUMENTED_ONLY = "request_too_large"
"""An error `type` on Anthropic's errors page (413) that the SDK's `ErrorResponse` union lacks."""


def check_error(route: str, data: Any) -> None:
    """An error body in the shape of the route's API: OpenAI's `ErrorObject` in `{"error": ...}`, or, under
    `/v1/messages`, Anthropic's `ErrorResponse`."""
    if route.partition(" ")[2].startswith(ANTHROPIC_PATHS):
        assert isinstance(data, dict) and list(data) == ["type", "error"], data
        if data["error"].get("type") == ANTHROPIC_DOCUMENTED_ONLY:
            assert isinstance(data["error"].get("message"), str) and len(data["error"]) == 2, data
        else:
            ErrorResponse.model_validate(data, strict=True)
        return
    assert isinstance(data, dict) and list(data) == ["error"], data
    assert {"message", "type", "param", "code"} <= set(data["error"]), data
    ErrorObject.model_validate(data["error"], strict=True)


ANTHROPIC_EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def _anthropic(route: str) -> bool:
    return route.partition(" ")[2].startswith(ANTHROPIC_PATHS)


def _check_anthropic_body(route: str, status: int, data: Any) -> None:
    if status >= 400:
        check_error(route, data)
    elif route == "POST /v1/messages":
        Message.model_validate(data, strict=True)
    else:
        MessageTokensCount.model_validate(data, strict=True)


def _check_anthropic_event(route: str, event: bytes, lines: list[str]) -> None:
    """`event: <type>` then `data: <JSON of that type>`: a stream event, a ping, or the error that ends a stream."""
    try:
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), lines
        name, data = lines[0].removeprefix("event: "), orjson.loads(lines[1].removeprefix("data: "))
        assert data["type"] == name, (name, data)
        if name == "error":
            check_error(route, data)
        elif name != "ping":
            ANTHROPIC_EVENTS.validate_python(data, strict=True)
    except (AssertionError, ValidationError, orjson.JSONDecodeError) as error:
        INVALID.append(f"{route} event {event!r}: {error}")
