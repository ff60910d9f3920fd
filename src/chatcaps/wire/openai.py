"""OpenAI's chat-completions wire, each shape written once: a request body read into a `ChatRequest`; tool calls and
their deltas, the assistant message, the finish reason, a choice, the chunks of a stream, a whole completion, its
usage, the error body and the model list.

Pure functions of plain values (the one exception, `completion_id`, makes a fresh id): the reply side builds its
deltas and calls with them, the hook and the integrations their messages, choices and chunks, `chatcaps serve` its
responses and errors. What a server does around them (HTTP, server-sent events, which error is which status) is the
server's (`chatcaps.serve`).

A request body is read in two depths: `read_prompt`, the fields that select the prompt (what `hook.prerender` reads:
messages, tools, the reasoning intent in any of its three spellings, `chat_template_kwargs`, the generation flags);
`read_chat`, those and what steers generation and the stream (what `chatcaps serve` reads). A field chatcaps cannot
honour is refused by name (`InputError`), never dropped: `n` > 1, `logprobs`, `logit_bias`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Literal, overload

from chatcaps.errors import InputError
from chatcaps.events import Call, CallArguments, CallEnd, CallStart, Event, Reasoning, Text
from chatcaps.request import ChatRequest, Sampling, ToolChoice
from chatcaps.vocab import REASONING_CONTENT, Intent, shown
from chatcaps.wire.fields import CONSTRAINED, flag, llama_cpp_fields, number, stops, thinking_intent

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


def delta(event: Event) -> dict[str, Any] | None:
    """A reply's event as a `chat.completion.chunk` delta: a call's id, where the model wrote none, is `call_<index>`
    (OpenAI's deltas carry no end of a call: None for `CallEnd`)."""
    return _AS_DELTA[type(event)](event)


def deltas(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Events as `chat.completion.chunk` deltas, one each (`delta`)."""
    if not events:  # most pieces of text complete none: this runs for every token
        return []
    if len(events) == 1 and type(event := events[0]) is Text:  # most others complete one piece of content
        return [{"content": event.text}]
    return [found for event in events if (found := _AS_DELTA[type(event)](event)) is not None]


def _text(event: Text) -> dict[str, Any]:
    return {"content": event.text}


def _reasoning(event: Reasoning) -> dict[str, Any]:
    return {REASONING_CONTENT: event.text}


def _call_start(event: CallStart) -> dict[str, Any]:
    return call_delta(event.index, tool_call(event.index, event.name, event.arguments, event.id))


def _call_arguments(event: CallArguments) -> dict[str, Any]:
    return arguments_delta(event.index, event.piece)


def _call_end(event: CallEnd) -> None:
    return None


_AS_DELTA: Mapping[type, Callable[[Any], dict[str, Any] | None]] = {
    Text: _text,
    Reasoning: _reasoning,
    CallStart: _call_start,
    CallArguments: _call_arguments,
    CallEnd: _call_end,
}


def calls(read: Iterable[Call]) -> tuple[dict[str, Any], ...]:
    """A reply's calls as OpenAI writes them, each at its place (`tool_call`: `call_<index>` where the model wrote no
    id)."""
    return tuple(tool_call(index, call.name, call.arguments, call.id) for index, call in enumerate(read))


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


# --- the request --------------------------------------------------------------------------------------------------

EFFORT_INTENTS: Mapping[str, Intent] = MappingProxyType(
    {
        "none": "off",
        "minimal": "low",
        "low": "low",
        "medium": "medium",
        "high": "high",
        "xhigh": "high",
    }
)
"""OpenAI's `reasoning_effort` values as intents; chatcaps has three tiers, so "minimal" and "xhigh" are the
nearest tier and the result's warnings say so."""
_APPROXIMATE = frozenset({"minimal", "xhigh"})
_UNSUPPORTED = ("logprobs", "top_logprobs", "logit_bias")
"""OpenAI fields that ask for something no backend here does; refused when set to anything but their default."""
_DEFAULTS: Mapping[str, tuple[Any, ...]] = {"top_logprobs": (0,)}
"""Values of those fields that ask for what happens anyway (besides null and false)."""
_REASONING_FORMATS = ("auto", "deepseek", "none")


def read_prompt(body: Mapping[str, Any]) -> ChatRequest:
    """The fields of a chat-completions body that select the prompt; every other field is left unread."""
    if not isinstance(body, Mapping):
        raise InputError(f"the request body must be a JSON object, got {type(body).__name__}", field="request")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InputError(f"request.messages must be a list, got {type(messages).__name__}", field="messages")
    intent, notes = reasoning_intent(body)
    template_args = body.get("chat_template_kwargs")
    if template_args is not None and not isinstance(template_args, Mapping):
        raise InputError("request.chat_template_kwargs must be an object", field="chat_template_kwargs")
    return ChatRequest(
        messages=messages,
        tools=body.get("tools"),
        reasoning=intent,
        template_args=template_args,
        add_generation_prompt=flag(body, "add_generation_prompt", default=True),
        continue_final_message=flag(body, "continue_final_message", default=False),
        notes=notes,
    )


def read_chat(body: Mapping[str, Any]) -> ChatRequest:
    """A whole chat-completions body: the prompt's fields (`read_prompt`), and the stream's and sampling fields,
    which are checked first."""
    stream = flag(body, "stream", default=False)
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, Mapping):
        raise InputError("request.stream_options must be an object", field="stream_options")
    include_usage = (stream_options or {}).get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise InputError("request.stream_options.include_usage must be true or false", field="stream_options")
    n = body.get("n")
    if n is not None and (n != 1 or isinstance(n, bool)):
        raise InputError(f"request.n must be 1 (one choice per request), got {shown(n)}", field="n")
    for name in _UNSUPPORTED:
        if body.get(name) not in (None, False, *_DEFAULTS.get(name, ())):
            raise InputError(f"request.{name} is not supported by chatcaps serve", field=name)
    tool_choice, answer_format = body.get("tool_choice"), _response_format(body.get("response_format"))
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise InputError(
            f"request.parallel_tool_calls must be true or false, got {shown(parallel)}", field="parallel_tool_calls"
        )
    max_tokens = number(body, "max_completion_tokens", int, low=1)
    if max_tokens is None:
        max_tokens = number(body, "max_tokens", int, low=1)
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=number(body, "temperature", float, low=0.0, high=2.0),
        top_p=number(body, "top_p", float, low=0.0, high=1.0),
        seed=number(body, "seed", int),
        stop=stops(body.get("stop"), "stop", one=True, most=4),
        presence_penalty=number(body, "presence_penalty", float, low=-2.0, high=2.0),
        frequency_penalty=number(body, "frequency_penalty", float, low=-2.0, high=2.0),
        llama_cpp=llama_cpp_fields(body),
        constrained=CONSTRAINED if answer_format is not None else (),
    )
    raw = _raw(body.get("reasoning_format"))
    return replace(
        read_prompt(body),
        tool_choice=None if tool_choice is None else ToolChoice(tool_choice, shown(tool_choice)),
        parallel_calls=parallel or not body.get("tools"),  # false asks nothing of a request without tools
        answer_format=answer_format,
        sampling=sampling,
        stream=stream,
        include_usage=include_usage,
        raw=raw,
    )


def reasoning_intent(body: Mapping[str, Any]) -> tuple[Intent, tuple[str, ...]]:
    """The intent the body asks for, from whichever of its three spellings it uses (`reasoning_effort`,
    `reasoning: {"effort"}`, Anthropic-style `thinking`; at most one), and notes on approximations."""
    given = [name for name in ("reasoning_effort", "reasoning", "thinking") if body.get(name) is not None]
    if len(given) > 1:
        raise InputError(f"request sets {' and '.join(given)}; give at most one", field=given[1])
    if not given:
        return None, ()
    name = given[0]
    value = body[name]
    if name == "reasoning":
        if not isinstance(value, Mapping):
            raise InputError('request.reasoning must be an object like {"effort": "low"}', field=name)
        name, value = "reasoning.effort", value.get("effort")
        if value is None:
            return None, ()
    if name == "thinking":
        return thinking_intent(value), ()
    if not isinstance(value, str) or value not in EFFORT_INTENTS:
        raise InputError(f"request.{name} must be one of {list(EFFORT_INTENTS)}, got {shown(value)}", field=name)
    note = (
        f"{name}={value!r} has no tier of its own; sent as {EFFORT_INTENTS[value]!r}" if value in _APPROXIMATE else ""
    )
    return EFFORT_INTENTS[value], (note,) if note else ()


def _response_format(value: Any) -> Mapping[str, Any] | None:
    """`response_format` where it asks for JSON (`json_object`, `json_schema` with a schema); None for text."""
    if value is None or value == {"type": "text"}:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    spec = value.get("json_schema") if isinstance(value, Mapping) else None
    if kind == "json_object" or (kind == "json_schema" and isinstance(spec, Mapping) and "schema" in spec):
        return value  # type: ignore[no-any-return]
    raise InputError(
        'request.response_format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
        f'"json_schema": {{"schema": ...}}}}, got {shown(value)}',
        field="response_format",
    )


def _raw(value: Any) -> bool:
    """llama-server's `reasoning_format`: "none" keeps the reasoning in `content`; "auto" and "deepseek" split it out,
    which is what chatcaps does anyway ("deepseek-legacy", both at once, is not offered)."""
    if value is None or value in _REASONING_FORMATS:
        return bool(value == "none")
    raise InputError(
        f"request.reasoning_format must be one of {list(_REASONING_FORMATS)}, got {shown(value)}",
        field="reasoning_format",
    )
