"""The llama-server transport against real HTTP on loopback: a stand-in server that answers each path with one of the
ways a server fails, a port with nothing listening, and a server too slow for the timeout. The real llama-server's
streaming is in test_llama_server.py."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from llama_server_harness import free_port

from chatcaps.errors import ServerError, SourceError
from chatcaps.transport import AsyncLlamaServerTransport, LlamaServerTransport, base_url, is_server_url

LLAMA_ERROR = json.dumps({"error": {"code": 500, "message": "boom", "type": "server_error"}})


class _StandIn(BaseHTTPRequestHandler):
    """Each path answers as one kind of server would; `/echo` returns the JSON it was sent."""

    def do_GET(self) -> None:
        if self.path == "/props":
            self._send(200, json.dumps({"chat_template": "{{ x }}"}))
        elif self.path == "/list":
            self._send(200, "[1, 2]")
        elif self.path == "/html":
            self._send(200, "<html>busy</html>")
        elif self.path == "/llama-error":
            self._send(500, LLAMA_ERROR)
        elif self.path == "/text-error":
            self._send(503, "Loading model")
        elif self.path == "/empty-error":
            self._send(404, "")
        elif self.path == "/slow":
            time.sleep(1.0)
            self._send(200, "{}")
        elif self.path == "/hang-up":
            self.close_connection = True  # no status line at all

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        streams = {
            "/stream": 'data: {"a": 1}\n\n: ping\n\ndata: {"b": 2}\n\n',
            "/stream-unended": 'data: {"a": 1}\n\ndata: {"b": 2}',
            "/stream-done": 'data: {"a": 1}\n\ndata: [DONE]\n\ndata: {"never": 1}\n\n',
            "/stream-multiline": 'event: x\ndata: {"a":\ndata: 1}\n\n',
            "/stream-error": 'data: {"a": 1}\n\ndata: {"error": {"code": 500, "message": "context full"}}\n\n',
            "/stream-bad": "data: not json\n\n",
        }
        if self.path == "/echo":
            self._send(200, body.decode())
        elif self.path in streams:
            self._send(200, streams[self.path], "text/event-stream")
        elif self.path == "/stream-refused":
            self._send(400, LLAMA_ERROR.replace("boom", "bad grammar"))
        elif self.path == "/stream-cut":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'data: {"a": 1}\n\n')
            self.close_connection = True

    def _send(self, status: int, body: str, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """`/slow` answers after its client gave up: the broken pipe is expected."""


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = _QuietServer(("127.0.0.1", 0), _StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def server(url: str) -> Iterator[LlamaServerTransport]:
    with LlamaServerTransport(url, timeout=0.5) as transport:
        yield transport


@pytest.mark.parametrize(
    "pasted",
    [
        "http://h:8080",
        "http://h:8080/",
        "http://h:8080//",
        "http://h:8080/props",
        "http://h:8080/props/",
        "http://h:8080/v1",
        "http://h:8080/v1/",
        "http://h:8080/v1/props",
        " http://h:8080/props\n",
    ],
)
def test_the_base_url_is_the_servers_root(pasted: str) -> None:
    assert base_url(pasted) == "http://h:8080"
    assert LlamaServerTransport(pasted, timeout=1).url == "http://h:8080"


def test_a_url_keeps_its_own_path_and_scheme() -> None:
    assert base_url("https://example.org/llama/v1") == "https://example.org/llama"
    assert (is_server_url("https://x"), is_server_url("http://x"), is_server_url("org/model")) == (True, True, False)


def test_a_url_without_http_is_a_server_error() -> None:
    with pytest.raises(ServerError) as caught:
        LlamaServerTransport("127.0.0.1:8080", timeout=1)
    assert str(caught.value) == "127.0.0.1:8080: a llama-server URL starts with http:// or https://"
    assert (caught.value.url, caught.value.status) == ("127.0.0.1:8080", None)


def test_httpx_is_imported_by_the_first_transport_not_by_chatcaps() -> None:
    code = (
        "import sys, chatcaps, chatcaps.cli, chatcaps.integrations.llama_server; from chatcaps import transport; "
        "before = 'httpx' in sys.modules; transport.LlamaServerTransport('http://h:1', timeout=1).close(); "
        "print(before, 'httpx' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "False True\n"


def test_get_and_post_json(server: LlamaServerTransport, url: str) -> None:
    assert server.get_json("/props") == {"chat_template": "{{ x }}"}
    body = {"prompt": "é", "n": [1, None, True]}
    assert server.post_json("/echo", body) == body


@pytest.mark.parametrize(
    ("path", "message", "status"),
    [
        ("/llama-error", "HTTP 500: boom", 500),
        ("/text-error", "HTTP 503: Loading model", 503),
        ("/empty-error", "HTTP 404: Not Found", 404),
        ("/list", "expected a JSON object, got list", None),
        ("/html", "not valid JSON (Expecting value: line 1 column 1 (char 0)): b'<html>busy</html>'", None),
        ("/hang-up", "the server did not answer: Server disconnected without sending a response.", None),
        ("/slow", "the server did not answer: timed out", None),
    ],
)
def test_each_failure_is_a_server_error_naming_url_status_and_message(
    server: LlamaServerTransport, url: str, path: str, message: str, status: int | None
) -> None:
    with pytest.raises(ServerError) as caught:
        server.get_json(path)
    error = caught.value
    assert (str(error), error.url, error.status, error.message) == (
        f"{url}{path}: {message}",
        url + path,
        status,
        message,
    )
    assert isinstance(error, SourceError)


def test_nothing_listening_is_a_server_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with LlamaServerTransport(url, timeout=2) as server, pytest.raises(ServerError) as caught:
        server.post_json("/completion", {})
    assert str(caught.value) == f"{url}/completion: the server did not answer: [Errno 111] Connection refused"


@pytest.mark.parametrize(
    ("path", "events"),
    [
        ("/stream", [{"a": 1}, {"b": 2}]),
        ("/stream-unended", [{"a": 1}, {"b": 2}]),
        ("/stream-done", [{"a": 1}]),
        ("/stream-multiline", [{"a": 1}]),
    ],
)
def test_stream_yields_each_events_json(server: LlamaServerTransport, path: str, events: list[object]) -> None:
    assert list(server.stream_json(path, {"stream": True})) == events


@pytest.mark.parametrize(
    ("path", "message", "status", "before"),
    [
        ("/stream-error", "the stream ended with an error: context full", None, [{"a": 1}]),
        ("/stream-bad", "not valid JSON (Expecting value: line 1 column 1 (char 0)): 'not json'", None, []),
        ("/stream-refused", "HTTP 400: bad grammar", 400, []),
        (
            "/stream-cut",
            "the server did not answer: peer closed connection without sending complete message body "
            "(received 16 bytes, expected 1000)",
            None,
            [{"a": 1}],
        ),
    ],
)
def test_a_failing_stream_raises_after_the_events_it_sent(
    server: LlamaServerTransport, url: str, path: str, message: str, status: int | None, before: list[object]
) -> None:
    received = []
    with pytest.raises(ServerError) as caught:
        for event in server.stream_json(path, {"stream": True}):
            received.append(event)
    assert (str(caught.value), caught.value.status) == (f"{url}{path}: {message}", status)
    assert received == before


GETS = ["/props", "/list", "/html", "/llama-error", "/text-error", "/empty-error", "/hang-up", "/slow"]
STREAMS = [
    "/stream",
    "/stream-unended",
    "/stream-done",
    "/stream-multiline",
    "/stream-error",
    "/stream-bad",
    "/stream-refused",
    "/stream-cut",
]
Outcome = tuple[object, ...]


def _outcome(results: list[Mapping[str, Any]], error: ServerError | None) -> Outcome:
    return (results, None) if error is None else (results, str(error), error.status)


def _sync_outcomes(url: str) -> list[Outcome]:
    outcomes = []
    with LlamaServerTransport(url, timeout=0.5) as server:
        for path in GETS:
            try:
                outcomes.append(_outcome([server.get_json(path)], None))
            except ServerError as error:
                outcomes.append(_outcome([], error))
        outcomes.append(_outcome([server.post_json("/echo", {"a": [1]})], None))
        for path in STREAMS:
            events: list[Mapping[str, Any]] = []
            try:
                events.extend(server.stream_json(path, {"stream": True}))
            except ServerError as error:
                outcomes.append(_outcome(events, error))
            else:
                outcomes.append(_outcome(events, None))
    return outcomes


async def _async_outcomes(url: str) -> list[Outcome]:
    outcomes = []
    async with AsyncLlamaServerTransport(url, timeout=0.5) as server:

        async def one(request: Callable[[], Awaitable[Mapping[str, Any]]]) -> Outcome:
            try:
                return _outcome([await request()], None)
            except ServerError as error:
                return _outcome([], error)

        for path in GETS:
            outcomes.append(await one(partial(server.get_json, path)))
        outcomes.append(await one(partial(server.post_json, "/echo", {"a": [1]})))
        for path in STREAMS:
            events: list[Mapping[str, Any]] = []
            try:
                async for event in server.stream_json(path, {"stream": True}):
                    events.append(event)
            except ServerError as error:
                outcomes.append(_outcome(events, error))
            else:
                outcomes.append(_outcome(events, None))
    return outcomes


def test_the_async_twin_answers_and_fails_exactly_alike(url: str) -> None:
    expected = _sync_outcomes(url)
    assert len(expected) == len(GETS) + 1 + len(STREAMS)
    assert sum(len(outcome) == 3 for outcome in expected) == 11  # the failures, each with its message
    assert asyncio.run(_async_outcomes(url)) == expected
    assert asyncio.run(AsyncLlamaServerTransport(url + "/v1/", timeout=1).aclose()) is None
    with pytest.raises(ServerError, match=r"^h:1: a llama-server URL starts with http"):
        AsyncLlamaServerTransport("h:1", timeout=1)


# --- a keep-alive connection the server closes --------------------------------------------------------------------


class _Unanswering:
    """A real HTTP/1.1 server on loopback (a socket per connection, each in a thread) that keeps connections alive,
    except that on its first connection it reads request number `drop` and closes without a byte of response: with
    `drop=2`, what a client sees when the server drops an idle keep-alive connection as a request goes out.
    `seen` records (connection, path) for each request read."""

    def __init__(self, drop: int) -> None:
        self.drop = drop
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.seen: list[tuple[int, str]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        number = 0
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(connection, number), daemon=True).start()
            number += 1

    def _serve(self, connection: socket.socket, number: int) -> None:
        with connection, connection.makefile("rb") as reader:
            while head := [line.decode().lower() for line in iter(reader.readline, b"\r\n")]:
                path = head[0].split()[1]
                self.seen.append((number, path))
                length = next((int(line[15:]) for line in head if line.startswith("content-length:")), 0)
                reader.read(length)
                if number == 0 and len(self.seen) == self.drop:
                    return  # closed with the request unanswered
                body = b'data: {"n": 1}\n\n' if path == "/stream" else b'{"n": 1}'
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def closing_server() -> Iterator[_Unanswering]:
    server = _Unanswering(drop=2)
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("second", ["get", "post", "stream"])
def test_a_keep_alive_connection_closed_unanswered_is_retried_once_on_a_new_one(
    closing_server: _Unanswering, second: str
) -> None:
    with LlamaServerTransport(closing_server.url, timeout=2) as transport:
        assert transport.get_json("/first") == {"n": 1}
        if second == "stream":
            assert list(transport.stream_json("/stream", {})) == [{"n": 1}]
        else:
            answer = transport.get_json("/second") if second == "get" else transport.post_json("/second", {})
            assert answer == {"n": 1}
        assert transport.get_json("/third") == {"n": 1}  # the pool goes on
    path = "/stream" if second == "stream" else "/second"
    assert closing_server.seen[:3] == [(0, "/first"), (0, path), (1, path)]
    assert closing_server.seen[3][1] == "/third"


@pytest.mark.parametrize("second", ["get", "post", "stream"])
def test_the_async_transport_retries_it_alike(closing_server: _Unanswering, second: str) -> None:
    async def talk() -> list[Mapping[str, Any]]:
        async with AsyncLlamaServerTransport(closing_server.url, timeout=2) as transport:
            answers = [await transport.get_json("/first")]
            if second == "stream":
                answers += [event async for event in transport.stream_json("/stream", {})]
            elif second == "get":
                answers.append(await transport.get_json("/second"))
            else:
                answers.append(await transport.post_json("/second", {}))
            return answers

    assert asyncio.run(talk()) == [{"n": 1}, {"n": 1}]
    path = "/stream" if second == "stream" else "/second"
    assert closing_server.seen == [(0, "/first"), (0, path), (1, path)]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_new_connection_closed_unanswered_is_not_retried(kind: str) -> None:
    """On a connection the request opened, the hang-up is the server's answer: one request, then the error."""

    async def talk(url: str) -> Mapping[str, Any]:
        async with AsyncLlamaServerTransport(url, timeout=2) as transport:
            return await transport.get_json("/first")

    server = _Unanswering(drop=1)
    try:
        with pytest.raises(ServerError) as caught:
            if kind == "sync":
                with LlamaServerTransport(server.url, timeout=2) as transport:
                    transport.get_json("/first")
            else:
                asyncio.run(talk(server.url))
        message = "the server did not answer: Server disconnected without sending a response."
        assert str(caught.value) == f"{server.url}/first: {message}"
        assert server.seen == [(0, "/first")]
    finally:
        server.close()
