"""What every route of the app does around HTTP, whichever API it speaks: read the body (bounded) as a JSON object,
await a stream's first piece before its response starts, frame a server-sent event, collect a whole generation, and
give up on work whose client disconnected. What goes wrong is raised (`errors.NotJSON`, `errors.BodyTooLarge`, the
backend's errors) and answered by the error table (`errors.answer`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from chatcaps.serve import errors
from chatcaps.serve.backend import close_quietly
from chatcaps.serve.request import GenerationEnd

_T = TypeVar("_T")
_U = TypeVar("_U")


CLIENT_LEFT = 499
"""The status logged for a request whose client disconnected before its answer (nginx's; no client reads it)."""


def json_response(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, headers=headers, media_type="application/json")


def sse_event(data: Mapping[str, Any], *, named: bool = False) -> dict[str, str]:
    """One server-sent event carrying `data` as JSON, for sse-starlette to frame; `named`: with an `event:` line
    naming its `type`, as Anthropic's events are."""
    framed = {"data": orjson.dumps(data).decode()}
    return {"event": str(data["type"]), **framed} if named else framed


async def read_object(http: Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object: 413 past `limit` bytes, 400 where it is not one."""
    body = await _body(http, limit)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise errors.NotJSON(f"the request body is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise errors.NotJSON(f"the request body must be a JSON object, got {type(data).__name__}")
    return data


async def _body(http: Request, limit: int) -> bytes:
    """The body, refused with 413 past `limit` bytes (by its declared length, or as it arrives)."""
    declared = http.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise errors.BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in http.stream():
        size += len(chunk)
        if size > limit:
            raise errors.BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def first(pieces: AsyncIterator[str | GenerationEnd]) -> str | GenerationEnd:
    """The first piece, awaited before a stream's response starts, so that a backend failing before any output is
    answered with its status rather than a broken stream; the iterator is closed when it fails."""
    try:
        return await anext(pieces)
    except BaseException:
        await close_quietly(pieces)
        raise


async def whole(receive: Receive, work: Awaitable[Any]) -> Response:
    """A whole (not streamed) answer: `work`'s result as JSON, or, when the client disconnected first, `work`
    cancelled and an empty `CLIENT_LEFT` response that nobody reads."""
    result = await unless_disconnected(receive, work)
    return json_response(result) if result is not None else Response(status_code=CLIENT_LEFT)


async def unless_disconnected(receive: Receive, work: Awaitable[_T]) -> _T | None:
    """`work`'s result, or None when the client disconnected first (`work` is then cancelled). What `work` raises is
    raised as it is (a task group would wrap it in an exception group)."""
    result: _T | None = None
    failure: Exception | None = None
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            result = await work
        except Exception as error:
            failure = error
        group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


async def both(one: Awaitable[_T], other: Awaitable[_U]) -> tuple[_T, _U]:
    """Both results, the two awaited at once (two requests to the backend cost one round trip, not two); when one
    fails, the other is cancelled and the failure raised as it is (a task group would wrap it in an exception
    group)."""
    first_result: list[_T] = []
    other_result: list[_U] = []
    failure: Exception | None = None
    async with anyio.create_task_group() as group:

        async def run(work: Awaitable[Any], into: list[Any]) -> None:
            nonlocal failure
            try:
                into.append(await work)
            except Exception as error:
                failure = failure or error
                group.cancel_scope.cancel()

        group.start_soon(run, one, first_result)
        group.start_soon(run, other, other_result)
    if failure is not None:
        raise failure
    return first_result[0], other_result[0]


async def collect(pieces: AsyncIterator[str | GenerationEnd]) -> tuple[str, GenerationEnd]:
    """A whole generation: its text and how it ended; the iterator is closed however reading stops."""
    try:
        finished = None
        text: list[str] = []
        async for piece in pieces:
            if isinstance(piece, GenerationEnd):
                finished = piece
            else:
                text.append(piece)
    finally:
        with anyio.CancelScope(shield=True):
            await close_quietly(pieces)
    assert finished is not None  # every backend ends with one
    return "".join(text), finished
