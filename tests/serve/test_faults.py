"""`chatcaps serve` under faults and strangers: the error table in each API's shape, the API key, an upstream that is
not up yet (503 until it is, then served with no restart), one that goes down and comes back, and one that dies or
stalls mid-stream (the stream ends with an error event, never a hung client).

The key and the table run over `Canned` (no model); the upstream faults over a real llama-server on loopback: the
tiny trained GGUF where the text matters, a random-weights one that never stops on its own where the stream must be
long enough to cut.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from llama_server_harness import LlamaServerMissing, RunningServer, free_port, start_llama_server, write_random_gguf
from serve_harness import Canned, serving
from starlette.exceptions import HTTPException
from tiny_model import TEMPLATE_FILE, tiny_gguf

from chatcaps import ChatTemplate
from chatcaps.errors import InputError, ServerError
from chatcaps.integrations.llama_server import LlamaServerClient
from chatcaps.serve import errors
from chatcaps.serve.app import create_app
from chatcaps.serve.upstream import UpstreamBackend, Waiting

HELLO: list[Any] = [{"role": "user", "content": "Hi there!"}]
CHAT = "POST /v1/chat/completions"
MESSAGES = "POST /v1/messages"
KEY = "sk-local-0123456789"


# --- the table, in both shapes ------------------------------------------------------------------------------------

UPSTREAM = "http://127.0.0.1:8080"
FAULTS: list[tuple[Exception, int, dict[str, Any], str, dict[str, str]]] = [
    (
        InputError("request.n must be 1 (one choice per request), got 2", field="n"),
        400,
        {"type": "invalid_request_error", "param": "n", "code": "invalid_value"},
        "invalid_request_error",
        {},
    ),
    (
        errors.NotJSON("the request body is not valid JSON: unexpected end of data"),
        400,
        {"type": "invalid_request_error", "param": None, "code": "invalid_json"},
        "invalid_request_error",
        {},
    ),
    (
        errors.Unauthorized("a missing or wrong API key"),
        401,
        {"type": "invalid_request_error", "param": None, "code": "invalid_api_key"},
        "authentication_error",
        {"WWW-Authenticate": "Bearer"},
    ),
    (
        errors.BodyTooLarge(16),
        413,
        {"type": "invalid_request_error", "param": None, "code": "request_too_large"},
        "request_too_large",
        {},
    ),
    (
        HTTPException(404, "Not Found"),
        404,
        {"type": "invalid_request_error", "param": None, "code": "not_found"},
        "not_found_error",
        {},
    ),
    (
        HTTPException(405, "Method Not Allowed"),
        405,
        {"type": "invalid_request_error", "param": None, "code": "method_not_allowed"},
        "invalid_request_error",
        {},
    ),
    (
        ServerError("HTTP 400: bad grammar", url=f"{UPSTREAM}/completion", status=400),
        502,
        {"type": "upstream_error", "param": None, "code": "upstream_error", "upstream_status": 400},
        "api_error",
        {},
    ),
    (
        ServerError("the server did not answer: peer closed connection", url=f"{UPSTREAM}/completion"),
        502,
        {"type": "upstream_error", "param": None, "code": "upstream_unreachable", "upstream_status": None},
        "api_error",
        {},
    ),
    (
        errors.UpstreamNotReady(UPSTREAM, "connection refused"),
        503,
        {"type": "upstream_error", "param": None, "code": "upstream_not_ready"},
        "overloaded_error",
        {"Retry-After": "1"},
    ),
    (
        RuntimeError("broken"),
        500,
        {"type": "server_error", "param": None, "code": "internal_error"},
        "api_error",
        {},
    ),
]


@pytest.mark.parametrize(("error", "status", "openai_fields", "anthropic_type", "headers"), FAULTS)
def test_each_fault_in_each_api_s_shape(
    error: Exception, status: int, openai_fields: dict[str, Any], anthropic_type: str, headers: dict[str, str]
) -> None:
    """One table, two shapes: the route's path picks OpenAI's or Anthropic's (`/v1/messages` and below); the status,
    the message and the headers are the same."""
    chat, messages, counting = (errors.answer(error, route) for route in (CHAT, MESSAGES, f"{MESSAGES}/count_tokens"))
    message = chat.body["error"]["message"]
    assert (chat.status, chat.body, chat.headers) == (status, {"error": {"message": message, **openai_fields}}, headers)
    anthropic_body = {"type": "error", "error": {"type": anthropic_type, "message": message.replace(CHAT, MESSAGES)}}
    assert (messages.status, messages.body, messages.headers) == (status, anthropic_body, headers)
    assert counting.body["error"]["type"] == anthropic_type
    assert errors.shape("POST /v1/messagesx") is errors.openai_error


def test_the_messages_of_upstream_faults() -> None:
    assert [errors.answer(error, CHAT).body["error"]["message"] for error, *_ in FAULTS[6:9]] == [
        f"upstream {UPSTREAM}/completion: HTTP 400: bad grammar",
        f"upstream {UPSTREAM}/completion: the server did not answer: peer closed connection",
        f"upstream {UPSTREAM} is not ready yet: connection refused",
    ]


# --- the API key --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed() -> Iterator[str]:
    with serving(create_app(Canned(), api_key=KEY)) as base:
        yield base


UNAUTHORIZED_MESSAGE = "a missing or wrong API key: send the server's key (x-api-key or Bearer)"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"x-api-key": "wrong"},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": "Bearer"},
        {"x-api-key": KEY[:-1]},
    ],
    ids=["none", "wrong-bearer", "wrong-x-api-key", "other-scheme", "empty-bearer", "prefix"],
)
def test_without_the_key_every_route_is_401_in_its_shape(keyed: str, headers: dict[str, str]) -> None:
    openai_body = {
        "error": {
            "message": UNAUTHORIZED_MESSAGE,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    anthropic_body = {"type": "error", "error": {"type": "authentication_error", "message": UNAUTHORIZED_MESSAGE}}
    for method, path, expected in [
        ("POST", "/v1/chat/completions", openai_body),
        ("GET", "/v1/models", openai_body),
        ("GET", "/v1/nowhere", openai_body),
        ("POST", "/v1/messages", anthropic_body),
        ("POST", "/v1/messages/count_tokens", anthropic_body),
    ]:
        response = httpx.request(method, f"{keyed}{path}", json={"messages": HELLO}, headers=headers)
        assert (response.status_code, response.json(), response.headers["www-authenticate"]) == (
            401,
            expected,
            "Bearer",
        )


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": f"Bearer {KEY}"}, {"authorization": f"bearer  {KEY}"}, {"x-api-key": KEY}],
    ids=["bearer", "bearer-lowercase-spaced", "x-api-key"],
)
def test_with_the_key(keyed: str, headers: dict[str, str]) -> None:
    response = httpx.post(f"{keyed}/v1/chat/completions", json={"messages": HELLO}, headers=headers)
    assert (response.status_code, response.json()["choices"][0]["message"]["content"]) == (
        200,
        "Hello! How can I help?",
    )


def test_health_needs_no_key(keyed: str) -> None:
    response = httpx.get(f"{keyed}/health")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_the_official_clients(keyed: str) -> None:
    """openai sends the key as a Bearer token, anthropic as `x-api-key`; a wrong one is each SDK's own
    `AuthenticationError` (the Anthropic route answers 401 before it is even routed)."""
    good = openai.OpenAI(base_url=f"{keyed}/v1", api_key=KEY, max_retries=0)
    assert (
        good.chat.completions.create(model="m", messages=HELLO).choices[0].message.content == "Hello! How can I help?"
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        openai.OpenAI(base_url=f"{keyed}/v1", api_key="wrong", max_retries=0).models.list()
    assert refused.value.code == "invalid_api_key"
    stranger = anthropic.Anthropic(base_url=keyed, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as also_refused:
        stranger.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    assert also_refused.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": UNAUTHORIZED_MESSAGE},
    }


# --- the command line: the key, and an upstream that is not up ---------------------------------------------------


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What `chatcaps serve` would serve: `serve.run`'s arguments, recorded instead of listening."""
    import chatcaps.serve

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(chatcaps.serve, "run", lambda backend, **options: calls.append({"backend": backend, **options}))
    monkeypatch.delenv("CHATCAPS_API_KEY", raising=False)
    return calls


def test_cli_starts_before_its_upstream_with_a_template(
    served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from chatcaps.cli import main

    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("CHATCAPS_API_KEY", "from-the-environment")
    assert main(["serve", "--upstream", url, "--template", str(TEMPLATE_FILE)]) == 0
    (call,) = served
    backend = call["backend"]
    assert isinstance(backend, UpstreamBackend) and isinstance(backend.client, Waiting)
    assert (backend.url, backend.model, call["api_key"]) == (url, "llama-server", "from-the-environment")
    err = capsys.readouterr().err
    assert err.startswith(f"chatcaps: {url}/props: the server did not answer: ")
    assert err.endswith("; answering 503 until it is up (GET /health says when)\n")


def test_cli_key_and_host(served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    from chatcaps.cli import main

    args = ["serve", "--upstream", f"http://127.0.0.1:{free_port()}", "--template", str(TEMPLATE_FILE)]
    assert main([*args, "--api-key", "k", "--host", "0.0.0.0"]) == 0
    assert main([*args, "--host", "::1"]) == 0
    assert main([*args, "--host", "0.0.0.0"]) == 0
    assert [(call["api_key"], call["host"]) for call in served] == [("k", "0.0.0.0"), (None, "::1"), (None, "0.0.0.0")]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["chatcaps: warning: listening on 0.0.0.0 with no --api-key: anyone who reaches it may use it"]


# --- a real llama-server that comes late, goes, comes back, dies or stalls mid-stream ---------------------------


def _start(model: Path, log: Path, **options: Any) -> RunningServer:
    try:
        return start_llama_server(model, log=log, **options)
    except LlamaServerMissing as error:
        pytest.fail(str(error), pytrace=False)


GREEDY: dict[str, Any] = {"temperature": 0.0, "seed": 0, "max_tokens": 64}


def test_an_upstream_that_comes_late_goes_and_comes_back(tmp_path: Path) -> None:
    """Started before llama-server, with the template given: 503 (and /health 503) until it is up, then served with
    no restart; when it goes, 502; when it is back on the same address, served again."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    template = ChatTemplate.from_str(TEMPLATE_FILE.read_text(encoding="utf-8"), name="tiny.jinja")
    body = {"messages": HELLO, **GREEDY}
    with serving(create_app(UpstreamBackend(Waiting(url, template)))) as base:
        for stream in (False, True):
            early = httpx.post(f"{base}/v1/chat/completions", json={**body, "stream": stream})
            error = early.json()["error"]
            assert (early.status_code, early.headers["retry-after"], error["code"]) == (503, "1", "upstream_not_ready")
            assert error["message"].startswith(
                f"upstream {url} is not ready yet: {url}/props: the server did not answer"
            )
        early = httpx.post(f"{base}/v1/messages", json={**body, "max_tokens": 64})
        assert (early.status_code, early.headers["retry-after"], early.json()["error"]["type"]) == (
            503,
            "1",
            "overloaded_error",
        )
        health = httpx.get(f"{base}/health")
        assert (health.status_code, health.json()["upstream"]["state"]) == (503, "unavailable")
        assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == "llama-server"

        server = _start(tiny_gguf(), tmp_path / "late.log", port=port)
        try:
            assert httpx.get(f"{base}/health").json() == {"status": "ok", "upstream": {"url": url, "state": "ready"}}
            answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60).json()
            assert (answer["model"], answer["choices"][0]["message"]["content"]) == (
                "tiny.gguf",
                "Hello! How can I help?",
            )
            message = httpx.post(f"{base}/v1/messages", json={**body, "max_tokens": 64}, timeout=60).json()
            assert message["content"][-1] == {"type": "text", "text": "Hello! How can I help?"}
        finally:
            server.stop()
        gone = httpx.post(f"{base}/v1/chat/completions", json=body)
        assert (gone.status_code, gone.json()["error"]["code"]) == (502, "upstream_unreachable")
        assert httpx.get(f"{base}/health").status_code == 503

        server = _start(tiny_gguf(), tmp_path / "back.log", port=port)
        try:
            back = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
            assert back.json()["choices"][0]["message"]["content"] == "Hello! How can I help?"
            assert httpx.get(f"{base}/health").status_code == 200
        finally:
            server.stop()


RAMBLE = 8000
"""Tokens a cut request asks for: seconds of generation (the model is told its context is 8192), so a cut lands
while llama-server is still writing, not after it has sent everything into the socket's buffers."""


@pytest.fixture
def rambling(tmp_path: Path) -> Iterator[RunningServer]:
    """A llama-server whose random weights never stop on their own."""
    model = write_random_gguf(tmp_path / "rambling.gguf", TEMPLATE_FILE.read_text(encoding="utf-8"), add_bos=False)
    context = ["--override-kv", f"llama.context_length=int:{RAMBLE + 192}"]
    server = _start(model, tmp_path / "server.log", ctx_size=RAMBLE + 192, extra_args=context)
    yield server
    os.kill(server.process.pid, signal.SIGCONT)
    server.stop()


CUT: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "error": {"type": "upstream_error", "param": None, "code": "upstream_unreachable", "upstream_status": None}
    },
    "/v1/messages": {"type": "error", "error": {"type": "api_error"}},
}
"""The last event of a stream whose upstream went away, on each API (its message apart)."""


def _stream_until_cut(base: str, path: str, cut: Any, timeout_s: float) -> tuple[list[str], float]:
    """A long stream; once 4 events have come, `cut()` is called; every `data:` line, and the seconds from the cut
    to the stream's end."""
    body = {"messages": HELLO, "max_tokens": RAMBLE, "stream": True, "temperature": 0.0}
    events: list[str] = []
    cut_at = 0.0
    with httpx.stream("POST", f"{base}{path}", json=body, timeout=timeout_s) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
            if len(events) == 4 and not cut_at:
                cut()
                cut_at = time.monotonic()
    return events, time.monotonic() - cut_at


@pytest.mark.parametrize("path", list(CUT))
def test_an_upstream_that_dies_mid_stream(rambling: RunningServer, path: str) -> None:
    """llama-server killed mid-generation: the stream ends at once with the 502 error as its last event, in the
    route's shape (OpenAI's object, no `[DONE]`, which the openai client raises; Anthropic's `error` event)."""
    with serving(create_app(UpstreamBackend(LlamaServerClient(rambling.url)))) as base:
        events, after = _stream_until_cut(base, path, rambling.process.kill, timeout_s=30)
    last = httpx.Response(200, content=events[-1]).json()
    message = last["error"].pop("message")
    assert (last, after < 10) == (CUT[path], True)
    assert re.fullmatch(r"upstream http://127\.0\.0\.1:\d+/completion: the server did not answer: .+", message)
    assert "[DONE]" not in events


def test_an_upstream_that_dies_during_a_whole_reply(rambling: RunningServer) -> None:
    """Not streamed: killed while its slot generates, the request is answered 502 `upstream_unreachable`."""
    body = {"messages": HELLO, "max_tokens": RAMBLE, "temperature": 0.0}
    with serving(create_app(UpstreamBackend(LlamaServerClient(rambling.url)))) as base, ThreadPoolExecutor(1) as pool:
        answer = pool.submit(httpx.post, f"{base}/v1/chat/completions", json=body, timeout=30)
        deadline = time.monotonic() + 30
        while not httpx.get(f"{rambling.url}/slots").json()[0]["is_processing"]:
            assert time.monotonic() < deadline, "llama-server never started generating"
            time.sleep(0.01)
        rambling.process.kill()
        response = answer.result()
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["upstream_status"]) == (502, "upstream_unreachable", None)


@pytest.mark.parametrize("path", list(CUT))
def test_an_upstream_that_stalls_mid_stream(rambling: RunningServer, path: str) -> None:
    """llama-server frozen (SIGSTOP) mid-generation: the transport's timeout (here 2 s) ends the stream with the error
    event, on either API; the client is never left waiting on a silent connection."""
    stall = lambda: os.kill(rambling.process.pid, signal.SIGSTOP)  # noqa: E731
    with serving(create_app(UpstreamBackend(LlamaServerClient(rambling.url, timeout=2.0)))) as base:
        events, after = _stream_until_cut(base, path, stall, timeout_s=30)
    last = httpx.Response(200, content=events[-1]).json()
    assert last["error"]["message"] == f"upstream {rambling.url}/completion: the server did not answer: timed out"
    assert 1.5 < after < 10
