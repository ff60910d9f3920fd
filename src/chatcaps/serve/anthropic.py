"""Anthropic's Messages API on the app's backend: `POST /v1/messages` and `POST /v1/messages/count_tokens`, on the
same pipeline as the OpenAI route (`serve/pipeline.py`).

A request is read into a `ChatRequest` by `chatcaps.wire.anthropic` (the one home of Anthropic's shapes), prepared
and answered by the pipeline through `_Message`: the reply's events, which `chatcaps.reply.blocks` turns into
content blocks in the order the model wrote them: one block open at a time, indices dense and in arrival order. A
whole reply goes through the same reader and blocks, so whole and streamed answers hold the same blocks. What a
prefilled assistant message already wrote (`ReplyStream.initial_events`) is read but not answered: as Anthropic's
API does, the answer is the continuation alone.

A thinking block's `signature` is an HMAC-SHA256 of its text under a key made when the app is created
(`wire.anthropic.signature`); a thinking block a client sends back is checked against it, and one that does not
verify (another server's, a restart's, an edited text) is rendered anyway and named in the `chatcaps` report's
warnings, as are dropped `redacted_thinking` blocks and Claude Code's normalised billing line. Bad input is an
`InputError` naming the Anthropic message index and field (one the render finds is mapped back from the canonical
messages), answered by the error table in Anthropic's shape.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import orjson
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from chatcaps.events import Event
from chatcaps.reply.blocks import Added, BlockEvent, BlockKind, Blocks, Closed, Opened
from chatcaps.request import ChatRequest
from chatcaps.serve import pipeline
from chatcaps.serve.backend import Backend
from chatcaps.serve.http import json_response, read_object
from chatcaps.serve.visibility import Visibility
from chatcaps.wire import anthropic

MESSAGES_ROUTE = "POST /v1/messages"


def routes(backend: Backend, *, max_body_bytes: int, reasoning: Visibility) -> list[Route]:
    """The two routes over `backend`, signing thinking blocks under a key of their own."""
    key = secrets.token_bytes(32)

    async def messages(http: Request) -> Response:
        read = _verified(anthropic.read_request(await read_object(http, max_body_bytes)), key)
        prepared = pipeline.prepare(backend, read, reasoning)
        return await pipeline.respond(http, backend, prepared, reasoning, _Message(backend.model, key))

    async def count_tokens(http: Request) -> Response:
        read = anthropic.read_request(await read_object(http, max_body_bytes), count_only=True)
        _, prompt, _ = pipeline.rendered(backend, read)
        return json_response(anthropic.token_count(await backend.count_tokens(prompt)))

    return [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
    ]


def _verified(read: ChatRequest, key: bytes) -> ChatRequest:
    """The request with a note for each thinking block sent back whose signature does not verify under `key`."""
    notes = [
        f"{sent.where}: the thinking block's signature does not verify (not this server's, or its text changed); "
        "rendered anyway"
        for sent in read.signed
        if not anthropic.verifies(sent.text, sent.signature, key)
    ]
    return replace(read, notes=(*read.notes, *notes)) if notes else read


class _Message:
    """Anthropic's answers (`pipeline.Encoder`): a whole `message`, or its events: `message_start`, each block's
    events, `message_delta` (with the `chatcaps` report) and `message_stop` (no `[DONE]`: Anthropic's streams have
    none). The blocks are the reply's (`chatcaps.reply.blocks`): a thinking block gets its signature before it
    stops; a tool_use block the model wrote no id for gets a fresh `toolu_` one. What a prefilled assistant message
    already wrote is not answered: the answer is the continuation alone."""

    route = MESSAGES_ROUTE
    named = True
    initial = False
    counts_prompt = True
    counts_hidden = True
    done: str | None = None

    def __init__(self, model: str, key: bytes) -> None:
        self.model = model
        self.key = key
        self.ident = anthropic.message_id()
        self.ping: Callable[[], ServerSentEvent] | None = _ping
        self.content: list[dict[str, Any]] = []
        """The blocks stopped so far, whole."""
        self._blocks = Blocks()
        self._call_id = ""
        """The open tool_use block's id."""

    def whole(self, ended: pipeline.Ended, events: list[Event]) -> dict[str, Any]:
        for event in events:
            self.events(event)
        self._written(self._blocks.close())
        reason, stop = _stop(ended)
        return anthropic.message(
            ident=self.ident,
            model=self.model,
            content=self.content,
            stop_reason=reason,
            stop_sequence=stop,
            usage=_usage(ended),
            chatcaps=ended.report,
        )

    def opening(self, prompt_tokens: int | None) -> list[dict[str, Any]]:
        return [anthropic.message_start(self.ident, self.model, prompt_tokens or 0)]

    def events(self, event: Event) -> list[dict[str, Any]]:
        return self._written(self._blocks.feed(event))

    def closing(self, ended: pipeline.Ended) -> list[dict[str, Any]]:
        reason, stop = _stop(ended)
        return [
            *self._written(self._blocks.close()),
            anthropic.message_delta(reason, stop, _usage(ended), chatcaps=ended.report),
            anthropic.message_stop(),
        ]

    def _written(self, found: list[BlockEvent]) -> list[dict[str, Any]]:
        """Block events in Anthropic's shapes; each stopped block joins `content`."""
        written = []
        for block in found:
            if isinstance(block, Opened):
                written.append(anthropic.block_start(block.index, self._empty(block)))
            elif isinstance(block, Added):
                written.append(_DELTAS[block.kind](block.index, block.text))
            else:
                written += self._stopped(block)
        return written

    def _empty(self, opened: Opened) -> dict[str, Any]:
        if opened.call is not None:
            self._call_id = opened.call.id or anthropic.tool_use_id()
            return anthropic.tool_use_block(self._call_id, opened.call.name, {})
        return anthropic.thinking_block("", "") if opened.kind == "reasoning" else anthropic.text_block("")

    def _stopped(self, closed: Closed) -> list[dict[str, Any]]:
        written = []
        if closed.kind == "reasoning":
            signed = anthropic.signature(closed.text, self.key)
            written.append(anthropic.signature_delta(closed.index, signed))
            self.content.append(anthropic.thinking_block(closed.text, signed))
        elif closed.call is not None:
            self.content.append(anthropic.tool_use_block(self._call_id, closed.call.name, _input(closed.text)))
        else:
            self.content.append(anthropic.text_block(closed.text))
        return [*written, anthropic.block_stop(closed.index)]


_DELTAS: Mapping[BlockKind, Callable[[int, str], dict[str, Any]]] = {
    "reasoning": anthropic.thinking_delta,
    "text": anthropic.text_delta,
    "call": anthropic.input_json_delta,
}


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the `input` object (a reply cut off inside them: the empty object)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _ping() -> ServerSentEvent:
    """What an idle stream sends every 15 seconds (sse-starlette's interval): Anthropic's `ping` event."""
    return ServerSentEvent(event="ping", data=orjson.dumps(anthropic.ping()).decode(), sep="\n")


def _stop(ended: pipeline.Ended) -> tuple[anthropic.StopReason, str | None]:
    finished = ended.finished
    reason = anthropic.stop_reason(
        finished.finish_reason, called_tools=bool(ended.reply.tool_calls), stop_sequence=finished.stop_sequence
    )
    return reason, finished.stop_sequence if reason == "stop_sequence" else None


def _usage(ended: pipeline.Ended) -> dict[str, Any]:
    return anthropic.usage(ended.finished.prompt_tokens, ended.finished.completion_tokens, ended.hidden)
