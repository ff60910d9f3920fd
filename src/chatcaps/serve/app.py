"""The ASGI app (starlette): `POST /v1/chat/completions`, `GET /v1/models`, `GET /health` over one `Backend`,
Anthropic's `POST /v1/messages` and `/v1/messages/count_tokens` (`serve/anthropic.py`) beside them, and the playground
(`GET /` and `/playground/...`, `serve/playground.py`), also served alone by `create_playground_app`.

A request is read (at most `max_body_bytes`) into a `ChatRequest` (`chatcaps.wire.openai.read_chat`), prepared and
answered by the one pipeline every API shares (`serve/pipeline.py`: the backend's sampling check, the render by
`hook.prerender`, the grammar; the reply read back by `hook.PostStream`, whole or streamed), through `_Completion`,
which writes `chatcaps.wire.openai`'s shapes. Routes raise; one table
(`serve/errors.py`) answers every failure in the error shape of the route's API, registered once as starlette's
exception handlers, and the same table writes the error event that ends a stream that has begun. Server-sent events are
sse-starlette's `EventSourceResponse`, which watches for the client's disconnect whatever ASGI version the server
speaks. A client that disconnects stops its generation: streamed or not, the request's work is cancelled and the
backend's iterator closed (`serve/http.py`, which every route shares). `--reasoning hide` keeps the reasoning out of
every answer (`serve/visibility.py`).

Middleware, so every route (of any API) gets it: with `api_key`, a request that does not send the key (`x-api-key`
or `Authorization: Bearer`, compared in constant time) is answered 401 in its route's shape before it is read;
`/health` stays open. `/health` asks a backend that can be unavailable (`backend.Watched`: an upstream not up yet)
and answers 503 while it is not ready. The playground's page (`GET /`) stays open too; its endpoints do not.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from chatcaps.defaults import MAX_BODY_BYTES
from chatcaps.engines import EngineName
from chatcaps.events import Event
from chatcaps.hook import choice, finish_reason_of
from chatcaps.render import ChatTemplate
from chatcaps.request import ChatRequest
from chatcaps.serve import anthropic, errors, pipeline, playground
from chatcaps.serve.backend import Backend, Watched
from chatcaps.serve.http import json_response, read_object
from chatcaps.serve.visibility import Visibility
from chatcaps.wire import openai
from chatcaps.wire.anthropic import with_model_info

CHAT_ROUTE = "POST /v1/chat/completions"
OPEN_PATHS = frozenset({"/health", "/"})
"""What answers without the key: the health check, and the playground's page (the same for everyone; the endpoints it
calls want the key, which the page sends once typed into it)."""


def create_app(
    backend: Backend,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    api_key: str | None = None,
    reasoning: Visibility = "show",
    playground_dirs: Sequence[str | Path] = (),
    engine: EngineName = "jinja2",
) -> Starlette:
    """The app serving `backend`, answering only requests that send `api_key` where one is given; the backend is
    closed when the app shuts down. `reasoning="hide"` keeps the model's reasoning from every client (only its token
    count is answered). The playground (`GET /`, `serve/playground.py`) shows the backend's template, and files under
    `playground_dirs`, compiled for `engine`."""
    created = int(time.time())

    async def chat(http: Request) -> Response:
        chat_request = openai.read_chat(await read_object(http, max_body_bytes))
        prepared = pipeline.prepare(backend, chat_request, reasoning)
        return await pipeline.respond(http, backend, prepared, reasoning, _Completion(backend.model, chat_request))

    async def models(http: Request) -> Response:
        """The model list in both APIs' shapes at once (each client reads its own fields)."""
        return json_response(with_model_info(openai.model_list(backend.model, created), created))

    async def health(http: Request) -> Response:
        if not isinstance(backend, Watched):
            return json_response({"status": "ok"})
        state = await backend.health()
        if state.ready:
            return json_response({"status": "ok", "upstream": state.detail})
        return json_response({"status": "unavailable", "upstream": state.detail}, 503, {"Retry-After": "1"})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await backend.aclose()

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            *anthropic.routes(backend, max_body_bytes=max_body_bytes, reasoning=reasoning),
            *playground.routes(
                playground.Playground.of(lambda tools: backend.template(tools=tools), playground_dirs, engine),
                max_body_bytes=max_body_bytes,
            ),
        ],
        exception_handlers={kind: _refuse for kind in errors.TABLE},
        middleware=[Middleware(RequireKey, key=api_key)] if api_key else [],
        lifespan=lifespan,
    )


def create_playground_app(
    template: ChatTemplate | None,
    *,
    folders: Sequence[str | Path] = (),
    engine: EngineName = "jinja2",
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Starlette:
    """The playground on its own (`chatcaps playground`): no model, `template` as the served one (None: only files
    under `folders` and pasted templates), failures answered from the same table."""
    served = None if template is None else lambda tools: template
    return Starlette(
        routes=playground.routes(playground.Playground.of(served, folders, engine), max_body_bytes=max_body_bytes),
        exception_handlers={kind: _refuse for kind in errors.TABLE},
    )


async def _refuse(http: Request, error: Exception) -> Response:
    """Every failure of a route, answered from the table."""
    answer = errors.answer(error, f"{http.method} {http.url.path}")
    return json_response(answer.body, answer.status, answer.headers)


class RequireKey:
    """ASGI middleware: a request that does not send `key` (`x-api-key: KEY` or `Authorization: Bearer KEY`) is
    answered 401 in its route's error shape, unread; `OPEN_PATHS` answer anyway. Every header sent is compared in
    constant time (`hmac.compare_digest`), so the answer's timing tells nothing of the key."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._sent(scope["headers"]):
            await self.app(scope, receive, send)
            return
        refused = errors.Unauthorized("a missing or wrong API key: send the server's key (x-api-key or Bearer)")
        answer = errors.answer(refused, f"{scope['method']} {scope['path']}")
        await json_response(answer.body, answer.status, answer.headers)(scope, receive, send)

    def _sent(self, headers: list[tuple[bytes, bytes]]) -> bool:
        given = [_token(value) if name == b"authorization" else value for name, value in headers if name in _KEYED]
        return any([hmac.compare_digest(value.strip(), self.key) for value in given])


_KEYED = (b"x-api-key", b"authorization")


def _token(authorization: bytes) -> bytes:
    """The credentials of an `Authorization: Bearer ...` header (the scheme is case-insensitive); nothing for any
    other scheme."""
    scheme, _, token = authorization.strip().partition(b" ")
    return token if scheme.lower() == b"bearer" else b""


class _Completion:
    """OpenAI's answers (`pipeline.Encoder`): a `chat.completion`, or its `chat.completion.chunk` events: the role,
    the deltas, the finish reason with the `chatcaps` report, the usage when asked for, `[DONE]`."""

    route = CHAT_ROUTE
    named = False
    initial = True
    counts_prompt = False
    done: str | None = "[DONE]"

    def __init__(self, model: str, request: ChatRequest) -> None:
        self.chunks = openai.Chunks(openai.completion_id(), model, int(time.time()))
        self.counts_hidden = request.include_usage
        self.ping: Callable[[], ServerSentEvent] | None = None

    def whole(self, ended: pipeline.Ended, events: list[Event]) -> dict[str, Any]:
        finished = ended.finished
        return openai.completion(
            ident=self.chunks.ident,
            model=self.chunks.model,
            created=self.chunks.created,
            choice=choice(ended.shown, finish_reason=finished.finish_reason),
            usage=openai.usage(finished.prompt_tokens, finished.completion_tokens, ended.hidden),
            chatcaps=ended.report,
        )

    def opening(self, prompt_tokens: int | None) -> list[dict[str, Any]]:
        return [self.chunks.delta(openai.role_delta())]

    def events(self, event: Event) -> list[dict[str, Any]]:
        delta = openai.delta(event)
        return [] if delta is None else [self.chunks.delta(delta)]

    def closing(self, ended: pipeline.Ended) -> list[dict[str, Any]]:
        finished = ended.finished
        last = self.chunks.delta({}, finish_reason_of(ended.reply, finished.finish_reason), chatcaps=ended.report)
        if not self.counts_hidden:
            return [last]
        return [last, self.chunks.usage(openai.usage(finished.prompt_tokens, finished.completion_tokens, ended.hidden))]
