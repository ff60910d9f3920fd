"""OpenAI's chat-completions shapes, each written once: tool calls and their deltas, the assistant message, the finish
reason (and, as `chatcaps serve` grows, the chunk, the completion and the error body).

Pure functions of plain values: the reply side builds its deltas and calls with them, the hook and the integrations
their messages and choices, `chatcaps serve` its responses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

FinishReason = Literal["stop", "length", "tool_calls"]
ServerFinish = Literal["stop", "length"]
"""Why a backend stopped: at an end of turn or stop string ("stop"), or at its token limit ("length")."""


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


def assistant_message(
    content: str, reasoning_content: str | None = None, tool_calls: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """OpenAI's assistant message: `content` null where the model only called tools; `reasoning_content` where the
    model reasoned (the field llama.cpp and vLLM return); `tool_calls` where it called tools."""
    message: dict[str, Any] = {"role": "assistant", "content": None if tool_calls and not content else content}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    return message


def finish_reason(server: str, *, called_tools: bool) -> str:
    """The backend's reason ("stop", "length"), as OpenAI reports it: "tool_calls" where the model stopped after
    calling tools."""
    return "tool_calls" if called_tools and server == "stop" else server


def choice(message: Mapping[str, Any], finish: str) -> dict[str, Any]:
    """`choices[0]` of a whole completion."""
    return {"index": 0, "message": dict(message), "finish_reason": finish}
