"""Anthropic's Messages API on the app's backend: `POST /v1/messages` and `POST /v1/messages/count_tokens`, on the
same pipeline as the OpenAI route (`serve/pipeline.py`).

A request is read into a `ChatRequest` by `chatcaps.wire.anthropic` (the one home of Anthropic's shapes), prepared
and answered by the pipeline through `_Message`: the hook's deltas, which `_Blocks` turns into content blocks in the
order the model wrote them: one block open at a time, indices dense and in arrival order. A whole reply goes through
the same reader and `_Blocks`, so whole and streamed answers hold the same blocks. What a prefilled assistant
message already wrote (`PostStream.initial`) is read but not answered: as Anthropic's API does, the answer is the
continuation alone.

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

from chatcaps.request import ChatRequest
from chatcaps.serve import pipeline
from chatcaps.serve.backend import Backend
from chatcaps.serve.http import json_response, read_object
from chatcaps.serve.visibility import Visibility
from chatcaps.vocab import REASONING_CONTENT
from chatcaps.wire import anthropic, openai

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


class _Blocks:
    """The hook's OpenAI deltas as Anthropic's content blocks and their events: a block opens when the kind of text
    changes (reasoning, content, a call), one open at a time, numbered in arrival order; a thinking block gets its
    signature before it stops. Under `--reasoning hide` reasoning deltas are left out before they get here."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.content: list[dict[str, Any]] = []
        """The blocks stopped so far, whole."""
        self._kind: str | None = None
        self._text: list[str] = []
        self._call: dict[str, str] = {}

    def feed(self, delta: Mapping[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if delta.get(REASONING_CONTENT):
            events += self._open("thinking", anthropic.thinking_block("", ""))
            events.append(anthropic.thinking_delta(len(self.content), delta[REASONING_CONTENT]))
            self._text.append(delta[REASONING_CONTENT])
        if delta.get("content"):
            events += self._open("text", anthropic.text_block(""))
            events.append(anthropic.text_delta(len(self.content), delta["content"]))
            self._text.append(delta["content"])
        for call in delta.get("tool_calls", ()):
            function = call.get("function", {})
            if "id" in call:  # a call opens: its id, name and the arguments known so far
                ident = call["id"] if call["id"] != openai.call_id(call["index"]) else anthropic.tool_use_id()
                name = function.get("name", "")
                events += self._close()
                events.append(anthropic.block_start(len(self.content), anthropic.tool_use_block(ident, name, {})))
                self._kind, self._call = "tool_use", {"id": ident, "name": name}
            if function.get("arguments"):
                events.append(anthropic.input_json_delta(len(self.content), function["arguments"]))
                self._text.append(function["arguments"])
        return events

    def close(self) -> list[dict[str, Any]]:
        """The open block's last events."""
        return self._close()

    def _open(self, kind: str, empty: dict[str, Any]) -> list[dict[str, Any]]:
        if self._kind == kind:
            return []
        events = self._close()
        self._kind = kind
        return [*events, anthropic.block_start(len(self.content), empty)]

    def _close(self) -> list[dict[str, Any]]:
        if self._kind is None:
            return []
        index, text = len(self.content), "".join(self._text)
        events = []
        if self._kind == "thinking":
            signed = anthropic.signature(text, self.key)
            events.append(anthropic.signature_delta(index, signed))
            self.content.append(anthropic.thinking_block(text, signed))
        elif self._kind == "text":
            self.content.append(anthropic.text_block(text))
        else:
            self.content.append(anthropic.tool_use_block(self._call["id"], self._call["name"], _input(text)))
        self._kind, self._text = None, []
        return [*events, anthropic.block_stop(index)]


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the `input` object (a reply cut off inside them: the empty object)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class _Message(_Blocks):
    """Anthropic's answers (`pipeline.Encoder`): a whole `message`, or its events: `message_start`, each block's
    events, `message_delta` (with the `chatcaps` report) and `message_stop` (no `[DONE]`: Anthropic's streams have
    none). What a prefilled assistant message already wrote is not answered: the answer is the continuation alone."""

    route = MESSAGES_ROUTE
    named = True
    initial = False
    counts_prompt = True
    counts_hidden = True
    done: str | None = None

    def __init__(self, model: str, key: bytes) -> None:
        super().__init__(key)
        self.model = model
        self.ident = anthropic.message_id()
        self.ping: Callable[[], ServerSentEvent] | None = _ping

    def whole(self, ended: pipeline.Ended, deltas: list[Mapping[str, Any]]) -> dict[str, Any]:
        for delta in deltas:
            self.feed(delta)
        self.close()
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

    def events(self, delta: Mapping[str, Any]) -> list[dict[str, Any]]:
        return self.feed(delta)

    def closing(self, ended: pipeline.Ended) -> list[dict[str, Any]]:
        reason, stop = _stop(ended)
        return [
            *self.close(),
            anthropic.message_delta(reason, stop, _usage(ended), chatcaps=ended.report),
            anthropic.message_stop(),
        ]


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
