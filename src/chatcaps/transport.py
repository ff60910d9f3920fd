"""The llama-server transport: the one place chatcaps talks to a server over HTTP, with one error type.

Every request to a llama-server goes through `LlamaServerTransport` (`sources.from_llama_server`, `LlamaServerClient`,
the CLI's server source): the base URL is normalised once (`base_url`), and every failure (nothing listening, an HTTP
error status, a body that is not a JSON object, an error event inside a stream) is a `ServerError` that names the URL,
the HTTP status when there was one, and the server's own message.

`AsyncLlamaServerTransport` is its twin over `httpx.AsyncClient` (for an ASGI server): only the I/O differs; the URL
rule, the errors, reading a reply and reading server-sent events (`_EventReader`) are the same functions. httpx is
imported when a transport is first made, not with `chatcaps` (it takes about as long to import as chatcaps itself).

Both retry one case, once: a pooled keep-alive connection that the server closed as the request went out, so it sent
no response at all (httpx's "Server disconnected without sending a response"; llama-server closes idle keep-alive
connections, and a request can cross the close). The retry goes out on a connection of its own. The same error on a
connection the request opened is the server's answer, and is not retried.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any

from chatcaps.defaults import QUOTED_CHARS
from chatcaps.errors import ServerError

if TYPE_CHECKING:
    import httpx

_SCHEMES = ("http://", "https://")
_PASTED_SUFFIXES = ("/props", "/v1")
"""Endpoints people paste along with the server's address; the transport wants the root."""
_NO_RESPONSE = "Server disconnected without sending a response."
"""httpcore's message for a connection closed before any byte of the response."""


def is_server_url(text: str) -> bool:
    """Whether `text` names a server (http:// or https://) rather than a file or a Hub repo."""
    return text.startswith(_SCHEMES)


def base_url(url: str) -> str:
    """The server's root: no trailing slash, no pasted `/props` or `/v1`; refuses a URL that is not http(s)."""
    base = url.strip().rstrip("/")
    for suffix in _PASTED_SUFFIXES:  # in this order, so `/v1/props` goes too
        base = base.removesuffix(suffix).rstrip("/")
    if not is_server_url(base):
        raise ServerError("a llama-server URL starts with http:// or https://", url=url)
    return base


def _unreachable(error: Exception, url: str) -> ServerError:
    """The error for a request that got no HTTP answer (refused, timed out, cut off); httpx's async timeouts have no
    text, so every timeout says the same."""
    import httpx

    detail = "timed out" if isinstance(error, httpx.TimeoutException) else str(error) or type(error).__name__
    return ServerError(f"the server did not answer: {detail}", url=url)


def _status_error(response: httpx.Response, url: str) -> ServerError:
    """The error for an HTTP error status (its body read), with llama-server's `{"error": {"message": ..., "type":
    ...}}` when it sent one."""
    message, kind = _server_error(response.content)
    return ServerError(
        f"HTTP {response.status_code}: {message or response.reason_phrase}",
        url=url,
        status=response.status_code,
        kind=kind,
    )


def _json_reply(response: httpx.Response, url: str) -> Mapping[str, Any]:
    """A whole reply's JSON object, or the error its status or body is."""
    if response.is_error:
        raise _status_error(response, url)
    return _json_object(response.content, url)


def excerpt(value: object) -> str:
    """The start of a server's answer or event, as an error quotes it (`defaults.QUOTED_CHARS`)."""
    return str(value)[:QUOTED_CHARS]


def _json_object(body: bytes | str, url: str) -> Mapping[str, Any]:
    """A body that must be one JSON object."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        shown = body[:QUOTED_CHARS]
        raise ServerError(f"not valid JSON ({error}): {shown!r}", url=url) from error
    if not isinstance(data, dict):
        raise ServerError(f"expected a JSON object, got {type(data).__name__}", url=url)
    return data


def _server_error(body: bytes) -> tuple[str, str | None]:
    """llama-server's error message in an error body, else the body's start ("" when empty), and its error `type`
    where it names one."""
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text[:QUOTED_CHARS], None
    detail = data.get("error") if isinstance(data, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("message"), str):
        kind = detail.get("type")
        return str(detail["message"]), kind if isinstance(kind, str) else None
    return text[:QUOTED_CHARS], None


class _EventReader:
    """Server-sent events, one line at a time, as llama-server streams them: each event's `data` is a JSON object.

    `line` returns the object an event completes (at its blank line), else None; `done` turns true at OpenAI's
    `data: [DONE]`. An event holding `"error"` (how llama-server reports a failure after the stream began) raises.
    Comments (llama-server's `:` keep-alive pings) and other fields are skipped.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.done = False
        self._data: list[str] = []

    def line(self, line: str) -> Mapping[str, Any] | None:
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                self._data.append(value.removeprefix(" "))
            return None
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        if data == "[DONE]":
            self.done = True
            return None
        event = _json_object(data, self.url)
        if "error" in event:
            detail = event["error"]
            message = detail.get("message") if isinstance(detail, Mapping) else detail
            raise ServerError(f"the stream ended with an error: {message}", url=self.url)
        return event


class _Connection:
    """httpcore's trace events for one request (httpx's `trace` extension): whether it opened its connection."""

    def __init__(self) -> None:
        self.opened = False

    def seen(self, name: str, info: Mapping[str, Any]) -> None:
        if name.startswith("connection.connect_tcp."):
            self.opened = True

    async def aseen(self, name: str, info: Mapping[str, Any]) -> None:
        self.seen(name, info)

    def went_stale(self, error: Exception) -> bool:
        """`error` is a reused connection closed before the server sent anything: the one case retried."""
        import httpx

        return isinstance(error, httpx.RemoteProtocolError) and str(error) == _NO_RESPONSE and not self.opened


def _errors() -> tuple[type[Exception], ...]:
    """httpx's exceptions for a request that got no answer (imported here: see the module docstring)."""
    import httpx

    return (httpx.HTTPError, httpx.InvalidURL)


class LlamaServerTransport:
    """A llama-server at `url` (its root; see `base_url`), spoken to in JSON over one pooled httpx connection.

    Close it (or use it as a context manager) to release the connection.
    """

    def __init__(self, url: str, *, timeout: float) -> None:
        self.url = base_url(url)
        self.timeout = timeout
        import httpx

        self._client = httpx.Client(base_url=self.url, timeout=timeout)

    def __repr__(self) -> str:
        return f"LlamaServerTransport({self.url!r})"

    def __enter__(self) -> LlamaServerTransport:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def get_json(self, path: str) -> Mapping[str, Any]:
        """GET `path`; its JSON object."""
        return self._send("GET", path, None)

    def post_json(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST `body` as JSON to `path`; the JSON object answered."""
        return self._send("POST", path, body)

    def stream_json(self, path: str, body: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
        """POST `body` to `path` and yield each server-sent event's JSON object as it arrives (llama-server's
        `/completion` with `"stream": true`); the stream ends when the server closes it or sends `[DONE]`."""
        url = self.url + path
        reader = _EventReader(url)
        try:
            with ExitStack() as stack:
                response = self._open(stack, "POST", path, body)
                if response.is_error:
                    response.read()
                    raise _status_error(response, url)
                for line in response.iter_lines():
                    event = reader.line(line)
                    if event is not None:
                        yield event
                    if reader.done:
                        return
                event = reader.line("")  # a last event the server did not end with a blank line
                if event is not None:
                    yield event
        except _errors() as error:
            raise _unreachable(error, url) from error

    def _send(self, method: str, path: str, body: Mapping[str, Any] | None) -> Mapping[str, Any]:
        url = self.url + path
        try:
            with ExitStack() as stack:
                response = self._open(stack, method, path, body)
                response.read()
        except _errors() as error:
            raise _unreachable(error, url) from error
        return _json_reply(response, url)

    def _open(self, stack: ExitStack, method: str, path: str, body: Mapping[str, Any] | None) -> httpx.Response:
        """The response, its body still to read (closed with `stack`); a stale keep-alive connection retried once on
        a client of its own (see the module docstring)."""
        import httpx

        connection = _Connection()
        request = self._client.build_request(method, path, json=body, extensions={"trace": connection.seen})
        try:
            response = self._client.send(request, stream=True)
        except httpx.RemoteProtocolError as error:
            if not connection.went_stale(error):
                raise
            client = stack.enter_context(httpx.Client(timeout=self.timeout))
            response = client.send(client.build_request(method, self.url + path, json=body), stream=True)
        stack.callback(response.close)
        return response


class AsyncLlamaServerTransport:
    """`LlamaServerTransport` over `httpx.AsyncClient`: the same methods, awaited; the same URL rule and errors."""

    def __init__(self, url: str, *, timeout: float) -> None:
        self.url = base_url(url)
        self.timeout = timeout
        import httpx

        self._client = httpx.AsyncClient(base_url=self.url, timeout=timeout)

    def __repr__(self) -> str:
        return f"AsyncLlamaServerTransport({self.url!r})"

    async def __aenter__(self) -> AsyncLlamaServerTransport:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def get_json(self, path: str) -> Mapping[str, Any]:
        """GET `path`; its JSON object."""
        return await self._send("GET", path, None)

    async def post_json(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST `body` as JSON to `path`; the JSON object answered."""
        return await self._send("POST", path, body)

    async def stream_json(self, path: str, body: Mapping[str, Any]) -> AsyncIterator[Mapping[str, Any]]:
        """POST `body` to `path` and yield each server-sent event's JSON object as it arrives."""
        url = self.url + path
        reader = _EventReader(url)
        try:
            async with AsyncExitStack() as stack:
                response = await self._open(stack, "POST", path, body)
                if response.is_error:
                    await response.aread()
                    raise _status_error(response, url)
                async for line in response.aiter_lines():
                    event = reader.line(line)
                    if event is not None:
                        yield event
                    if reader.done:
                        return
                event = reader.line("")  # a last event the server did not end with a blank line
                if event is not None:
                    yield event
        except _errors() as error:
            raise _unreachable(error, url) from error

    async def _send(self, method: str, path: str, body: Mapping[str, Any] | None) -> Mapping[str, Any]:
        url = self.url + path
        try:
            async with AsyncExitStack() as stack:
                response = await self._open(stack, method, path, body)
                await response.aread()
        except _errors() as error:
            raise _unreachable(error, url) from error
        return _json_reply(response, url)

    async def _open(
        self, stack: AsyncExitStack, method: str, path: str, body: Mapping[str, Any] | None
    ) -> httpx.Response:
        """`LlamaServerTransport._open`, awaited."""
        import httpx

        connection = _Connection()
        request = self._client.build_request(method, path, json=body, extensions={"trace": connection.aseen})
        try:
            response = await self._client.send(request, stream=True)
        except httpx.RemoteProtocolError as error:
            if not connection.went_stale(error):
                raise
            client = await stack.enter_async_context(httpx.AsyncClient(timeout=self.timeout))
            response = await client.send(client.build_request(method, self.url + path, json=body), stream=True)
        stack.push_async_callback(response.aclose)
        return response
