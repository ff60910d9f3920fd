"""OpenAI's chat-completions shapes, each written once: tool calls and their deltas, the assistant message, the finish
reason, a choice, the chunks of a stream, a whole completion, its usage, the error body and the model list.

Pure functions of plain values (the one exception, `completion_id`, makes a fresh id): the reply side builds its
deltas and calls with them, the hook and the integrations their messages, choices and chunks, `chatcaps serve` its
responses and errors. What a server does around them (HTTP, server-sent events, which error is which status) is the
server's (`chatcaps.serve`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from chatcaps.errors import InputError
from chatcaps.vocab import REASONING_CONTENT

FinishReason = Literal["stop", "length", "tool_calls"]
ServerFinish = Literal["stop", "length"]
"""Why a backend stopped: at an end of turn or stop string ("stop"), or at its token limit ("length")."""
ErrorType = Literal["invalid_request_error", "upstream_error", "server_error"]
"""The error body's `type`: the request's fault, the upstream's, or the server's own."""


def call_id(index: int) -> str:
    """The id of a call whose text writes none: `call_<index>`, its place in the reply."""
    return f"call_{index}"


def tool_call(index: int, name: str, arguments: str, ident: str | None = None) -> dict[str, Any]:
    """A whole call as OpenAI writes it: `{"id", "type": "function", "function": {"name", "arguments"}}`."""
    return {
        "id": ident or call_id(index),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def call_delta(index: int, call: Mapping[str, Any]) -> dict[str, Any]:
    """A `tool_calls` delta opening call `index` (its id, type, name and the arguments known so far)."""
    return {"tool_calls": [{"index": index, **call}]}


def arguments_delta(index: int, piece: str) -> dict[str, Any]:
    """A `tool_calls` delta adding `piece` to the arguments of call `index`."""
    return {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def role_delta() -> dict[str, Any]:
    """The first delta of a streamed message, as OpenAI sends it: the role and empty content."""
    return {"role": "assistant", "content": ""}


def assistant_message(
    content: str, reasoning_content: str | None = None, tool_calls: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """OpenAI's assistant message: `content` null where the model only called tools; `reasoning_content` where the
    model reasoned (the field llama.cpp and vLLM return); `tool_calls` where it called tools."""
    message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls and not content else content}
    if reasoning_content is not None:
        message[REASONING_CONTENT] = reasoning_content
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    return message


@overload
def finish_reason(server: ServerFinish, *, called_tools: bool) -> FinishReason: ...
@overload
def finish_reason(server: str, *, called_tools: bool) -> str: ...
def finish_reason(server: str, *, called_tools: bool) -> str:
    """The backend's reason ("stop", "length"), as OpenAI reports it: "tool_calls" where the model stopped after
    calling tools."""
    return "tool_calls" if called_tools and server == "stop" else server


def choice(message: Mapping[str, Any], finish: str) -> dict[str, Any]:
    """`choices[0]` of a whole completion."""
    return {"index": 0, "message": dict(message), "finish_reason": finish}


def completion_id() -> str:
    """A fresh `chatcmpl-` id for one completion (every chunk of a stream carries the same)."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int | None = None) -> dict[str, Any]:
    """The token counts of one completion; `reasoning_tokens` where the reasoning was counted (hidden from the
    client)."""
    counts: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reasoning_tokens is not None:
        counts["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return counts


def completion(
    *,
    ident: str,
    model: str,
    created: int,
    choice: Mapping[str, Any],
    usage: Mapping[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """A whole `chat.completion` around `choices[0]` (`choice`); `extra` adds top-level fields (chatcaps' report)."""
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{**choice, "logprobs": None}],
        "usage": dict(usage),
        **extra,
    }


@dataclass(frozen=True)
class Chunks:
    """The `chat.completion.chunk`s of one streamed completion, each with the same id, model and creation time."""

    ident: str
    model: str
    created: int

    def delta(
        self,
        delta: Mapping[str, Any],
        finish: str | None = None,
        *,
        logprobs: Any = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The chunk carrying one delta (and, on the last, the finish reason); `extra` adds top-level fields."""
        entry = {"index": 0, "delta": dict(delta), "finish_reason": finish, "logprobs": logprobs}
        return self._chunk([entry], extra)

    def usage(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        """The usage chunk `stream_options.include_usage` asks for: no choices."""
        return self._chunk([], {"usage": dict(usage)})

    def _chunk(self, choices: list[dict[str, Any]], extra: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": self.ident,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }


def error(
    message: str, *, kind: ErrorType, param: str | None = None, code: str | None = None, **more: Any
) -> dict[str, Any]:
    """OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`, plus any `more` fields."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code, **more}}


def input_param(error: InputError) -> str | None:
    """Where an `InputError` points, as OpenAI's `param`: `messages[2].role`, `tools`, `reasoning_effort`."""
    if error.index is None:
        return error.field
    return f"messages[{error.index}]" + (f".{error.field}" if error.field else "")


def model_list(model: str, created: int) -> dict[str, Any]:
    """`GET /v1/models` of a server that answers with one model."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "chatcaps"}]}
