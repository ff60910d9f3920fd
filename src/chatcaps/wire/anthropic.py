"""Anthropic's Messages API, each shape written once: a request body read into a `ChatRequest` (canonical messages,
tools, the tool choice, the reasoning intent, sampling, the signed thinking blocks sent back, where each canonical
message came from), the response's content blocks and message, the stream's events, the token count, the error
body, the thinking signature.

Pure functions of plain values (`signature` takes its key; `message_id` and `tool_use_id` make fresh ids). A bad
request raises `InputError` naming the message index and field as Anthropic numbers them
(`messages[2].content[1].tool_use_id`). What a server does around these (HTTP, server-sent events, which error is
which status, rendering and generating) is the server's (`chatcaps.serve.anthropic`).

Canonical messages are chatcaps' input (docs/polyfills.md): the `system` text first; a `thinking` block becomes the
`reasoning_content` of its assistant turn (the signature is checked by the server); `redacted_thinking` cannot be
rendered and is dropped (a note says where); `tool_use` blocks become the turn's `tool_calls` (arguments as the
object); each `tool_result` block becomes a `tool` message with `tool_call_id`, in the place it stands among the
user turn's blocks; an `image` becomes an `image` block with its URL (base64 data as a `data:` URL). A last message
from the assistant is a prefill: the model continues it (`continue_final_message`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from chatcaps.errors import InputError
from chatcaps.request import ChatRequest, Origins, Sampling, Signed, ToolChoice, Words
from chatcaps.vocab import REASONING_CONTENT, Intent, Tier, shown
from chatcaps.wire.fields import flag, llama_cpp_fields, number, stops, thinking_intent

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "rate_limit_error",
    "not_found_error",
    "request_too_large",
    "api_error",
    "overloaded_error",
]
ERROR_TYPES: Mapping[int, ErrorType] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
"""Anthropic's error `type` per HTTP status (its API's errors page); any other 4xx is "invalid_request_error", any
other status "api_error"."""
EFFORTS: Mapping[str, Tier] = {"low": "low", "medium": "medium", "high": "high", "max": "high"}
"""`output_config.effort` as the intent's tier ("max" is past chatcaps' top tier: sent as "high", noted once, here,
in the words the client used)."""
BILLING_PREFIX = "x-anthropic-billing-header:"
"""Claude Code's per-request billing line, the first system block: its `cch=` value changes on every request."""
BILLING_NORMAL = "00000"
_CCH = re.compile(r"\bcch=([^;\s]*)")
_ROLES = ("user", "assistant", "system")
"""A system message among the turns is read as one (Claude Code sends them; llama-server takes them), though
Anthropic's own API takes the system text only in `system`."""
_TOOL_CHOICES = ("auto", "any", "tool", "none")
_THINKING_TYPES = ("enabled", "disabled", "adaptive")
_SIGNATURE_PREFIX = "chatcaps1."


def read_request(body: Mapping[str, Any], *, count_only: bool = False) -> ChatRequest:
    """Read a `/v1/messages` body (`count_only`: a `/v1/messages/count_tokens` one, which has no `max_tokens`)."""
    notes: list[str] = []
    system = _system(body.get("system"), notes)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise InputError(f"request.messages must be a non-empty list, got {shown(raw)}", field="messages")
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system is not None else []
    origins: list[int | str] = ["system"] * len(messages)
    signed: list[Signed] = []
    names: dict[str, str] = {}
    for index, message in enumerate(raw):
        for turn in _message(index, message, names, signed, notes):
            messages.append(turn)
            origins.append(index)
    tools = _tools(body.get("tools"))
    tool_choice, parallel = _tool_choice(body.get("tool_choice"), tools)
    reasoning = _reasoning(body.get("thinking"), body.get("output_config"), notes)
    max_tokens = number(body, "max_tokens", int, low=1, joined=True)
    if max_tokens is None and not count_only:
        raise InputError("request.max_tokens is required", field="max_tokens")
    stream = flag(body, "stream", default=False)
    stop = stops(body.get("stop_sequences"), "stop_sequences", empty=False)
    temperature = number(body, "temperature", float, low=0.0, high=1.0, joined=True)
    top_p = number(body, "top_p", float, low=0.0, high=1.0, joined=True)
    top_k = number(body, "top_k", int, low=0, joined=True)
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        stop=stop,
        llama_cpp={**llama_cpp_fields(body), **({} if top_k is None else {"top_k": top_k})},
    )
    continues = messages[-1]["role"] == "assistant"  # a prefilled answer: the model continues it
    none = tool_choice is not None and tool_choice.value == "none"  # "none": no tools rendered
    return ChatRequest(
        messages=tuple(messages),
        tools=tools if tools and not none else None,
        tool_choice=None if none else tool_choice,
        parallel_calls=parallel,
        reasoning=reasoning,
        add_generation_prompt=not continues,
        continue_final_message=continues,
        sampling=sampling,
        stream=stream,
        notes=tuple(notes),
        signed=tuple(signed),
        origins=Origins(tuple(origins)),
        words=WORDS,
    )


WORDS = Words(auto='{"type": "auto"}', parallel="tool_choice.disable_parallel_tool_use")
"""Anthropic's names for "auto" and for turning parallel calls off, in what the server writes back."""


def _system(value: Any, notes: list[str]) -> str | None:
    """The system text: a string, or text blocks joined by blank lines; Claude Code's billing line normalised."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise InputError(
            f"request.system must be a string or a list of text blocks, got {shown(value)}", field="system"
        )
    texts = []
    for at, block in enumerate(value):
        if not isinstance(block, Mapping) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InputError(f'request.system[{at}] must be {{"type": "text", "text": ...}}', field=f"system[{at}]")
        texts.append(_billing(block["text"], at, notes))
    return "\n\n".join(texts)


def _billing(text: str, at: int, notes: list[str]) -> str:
    """Claude Code's billing line with its `cch=` value set to `BILLING_NORMAL`, so the prompt's prefix stays the
    same from request to request (a prefix cache can then reuse it)."""
    found = _CCH.search(text) if text.startswith(BILLING_PREFIX) else None
    if found is None or found.group(1) == BILLING_NORMAL:
        return text
    notes.append(f"system[{at}]: Claude Code's billing line: cch={found.group(1)} normalised to cch={BILLING_NORMAL}")
    return text[: found.start(1)] + BILLING_NORMAL + text[found.end(1) :]


def _message(
    index: int, message: Any, names: dict[str, str], signed: list[Signed], notes: list[str]
) -> list[dict[str, Any]]:
    """One Anthropic message as canonical messages: an assistant turn, or a user turn split at its tool results."""
    if not isinstance(message, Mapping):
        raise InputError(f"a message must be an object, got {shown(message)}", index=index)
    role = message.get("role")
    if role not in _ROLES:
        raise InputError(f"role must be one of {list(_ROLES)}, got {shown(role)}", index=index, field="role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise InputError(
            f"content must be a string or a list of blocks, got {shown(content)}", index=index, field="content"
        )
    if role == "assistant":
        return [_assistant(index, content, names, signed, notes)]
    if role == "system":
        return [{"role": "system", "content": _system_blocks(index, content)}]
    return _user(index, content, names)


def _system_blocks(index: int, content: list[Any]) -> str:
    """A system message's text blocks, joined by blank lines as the `system` field's are."""
    texts = []
    for at, block in enumerate(content):
        if not isinstance(block, Mapping) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise InputError(
                f'a system message\'s block must be {{"type": "text", "text": ...}}, got {shown(block)}',
                index=index,
                field=f"content[{at}]",
            )
        texts.append(block["text"])
    return "\n\n".join(texts)


def _block(
    index: int, at: int, block: Any, allowed: Sequence[str], within: str = "content"
) -> tuple[str, Mapping[str, Any]]:
    """Where block `at` of `within` is, and the block, checked to be one of the `allowed` types."""
    where = f"{within}[{at}]"
    if not isinstance(block, Mapping) or block.get("type") not in allowed:
        kind = block.get("type") if isinstance(block, Mapping) else block
        raise InputError(f"a block must be one of {list(allowed)}, got {shown(kind)}", index=index, field=where)
    return where, block


def _text(index: int, where: str, block: Mapping[str, Any], key: str = "text") -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {shown(value)}", index=index, field=f"{where}.{key}")
    return value


def _assistant(
    index: int, content: list[Any], names: dict[str, str], signed: list[Signed], notes: list[str]
) -> dict[str, Any]:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    allowed = ("text", "thinking", "redacted_thinking", "tool_use")
    for at, raw in enumerate(content):
        where, block = _block(index, at, raw, allowed)
        kind = block["type"]
        if kind == "text":
            texts.append(_text(index, where, block))
        elif kind == "thinking":
            text = _text(index, where, block, "thinking")
            signature = block.get("signature", "")
            if not isinstance(signature, str):
                raise InputError(f"must be a string, got {shown(signature)}", index=index, field=f"{where}.signature")
            signed.append(Signed(f"messages[{index}].{where}", text, signature))
            reasoning.append(text)
        elif kind == "redacted_thinking":
            notes.append(f"messages[{index}].{where}: redacted_thinking cannot be rendered; dropped")
        else:
            calls.append(_tool_use(index, where, block, names))
    turn: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        turn[REASONING_CONTENT] = "\n\n".join(reasoning)
    if calls:
        turn["tool_calls"] = calls
    return turn


def _tool_use(index: int, where: str, block: Mapping[str, Any], names: dict[str, str]) -> dict[str, Any]:
    ident, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    for key, value in (("id", ident), ("name", name)):
        if not isinstance(value, str) or not value:
            raise InputError(f"must be a non-empty string, got {shown(value)}", index=index, field=f"{where}.{key}")
    if not isinstance(arguments, Mapping):
        raise InputError(f"must be an object, got {shown(arguments)}", index=index, field=f"{where}.input")
    assert isinstance(ident, str) and isinstance(name, str)  # checked above
    names[ident] = name
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": dict(arguments)}}


def _user(index: int, content: list[Any], names: dict[str, str]) -> list[dict[str, Any]]:
    """A user turn's blocks: each tool result a `tool` message where it stands, the other blocks a user turn."""
    turns: list[dict[str, Any]] = []
    blocks: list[dict[str, Any]] = []
    for at, raw in enumerate(content):
        where, block = _block(index, at, raw, ("text", "image", "tool_result"))
        if block["type"] != "tool_result":
            blocks.append(_content_block(index, where, block))
            continue
        if blocks:
            turns.append({"role": "user", "content": blocks})
            blocks = []
        turns.append(_tool_result(index, where, block, names))
    if blocks or not turns:
        turns.append({"role": "user", "content": blocks})
    return turns


def _content_block(index: int, where: str, block: Mapping[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"type": "text", "text": _text(index, where, block)}
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "base64" and isinstance(source, Mapping):
        media, data = source.get("media_type"), source.get("data")
        if isinstance(media, str) and isinstance(data, str):
            return {"type": "image", "url": f"data:{media};base64,{data}"}
    elif kind == "url" and isinstance(source, Mapping) and isinstance(source.get("url"), str):
        return {"type": "image", "url": source["url"]}
    raise InputError(
        'an image source must be {"type": "base64", "media_type", "data"} or {"type": "url", "url"}, '
        f"got {shown(source)}",
        index=index,
        field=f"{where}.source",
    )


def _tool_result(index: int, where: str, block: Mapping[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """A `tool` message: the result's text (text blocks joined), or its blocks where it holds an image; `is_error`
    puts "Error: " before it."""
    ident = block.get("tool_use_id")
    if not isinstance(ident, str) or ident not in names:
        raise InputError(f"no earlier tool_use has id {shown(ident)}", index=index, field=f"{where}.tool_use_id")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise InputError(f"must be true or false, got {shown(is_error)}", index=index, field=f"{where}.is_error")
    content: Any = block.get("content", "")
    if isinstance(content, list):
        parts = [
            _content_block(index, inner, part)
            for at, raw in enumerate(content)
            for inner, part in (_block(index, at, raw, ("text", "image"), f"{where}.content"),)
        ]
        if all(part["type"] == "text" for part in parts):
            content = "\n\n".join(part["text"] for part in parts)
        else:
            content = [{"type": "text", "text": "Error:"}, *parts] if is_error else parts
    elif not isinstance(content, str):
        raise InputError(
            f"must be a string or a list of text and image blocks, got {shown(content)}",
            index=index,
            field=f"{where}.content",
        )
    if isinstance(content, str) and is_error:
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": ident, "name": names[ident], "content": content}


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    """Anthropic's tools as OpenAI's function tools (`input_schema` is the parameters' JSON schema)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError(f"request.tools must be a list, got {shown(value)}", field="tools")
    tools = []
    for at, tool in enumerate(value):
        name = tool.get("name") if isinstance(tool, Mapping) else None
        schema = tool.get("input_schema") if isinstance(tool, Mapping) else None
        if not isinstance(name, str) or not isinstance(schema, Mapping):
            raise InputError(f'request.tools[{at}] must be {{"name": ..., "input_schema": {{...}}}}', field="tools")
        function: dict[str, Any] = {"name": name}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        function["parameters"] = dict(schema)
        if tool.get("strict") is True:  # Anthropic's strict tool use: the arguments exactly the schema
            function["strict"] = True
        tools.append({"type": "function", "function": function})
    return tuple(tools)


def _tool_choice(value: Any, tools: Sequence[Mapping[str, Any]]) -> tuple[ToolChoice | None, bool]:
    """Anthropic's `tool_choice` in OpenAI's spelling (a named tool keeps its name), and `disable_parallel_tool_use`
    as whether calls may come in parallel."""
    if value is None:
        return None, True
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind not in _TOOL_CHOICES or not isinstance(value, Mapping):
        raise InputError(
            f"request.tool_choice.type must be one of {list(_TOOL_CHOICES)}, got {shown(kind)}", field="tool_choice"
        )
    disable = value.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise InputError(
            f"request.tool_choice.disable_parallel_tool_use must be true or false, got {shown(disable)}",
            field="tool_choice",
        )
    parallel = not disable
    if kind == "tool":
        name = value.get("name")
        known = [tool["function"]["name"] for tool in tools]
        if name not in known:
            raise InputError(f"request.tool_choice.name must be one of {known}, got {shown(name)}", field="tool_choice")
        return ToolChoice({"type": "function", "function": {"name": name}}, repr(kind)), parallel
    return ToolChoice({"auto": "auto", "any": "required", "none": "none"}[kind], repr(kind)), parallel


def _reasoning(thinking: Any, output_config: Any, notes: list[str]) -> Intent:
    """`thinking` and `output_config.effort` as the reasoning intent: disabled is off; enabled is its budget (on
    without one); adaptive is on, or the effort where one is given; an effort alone is that effort."""
    effort = None
    if output_config is not None:
        if not isinstance(output_config, Mapping):
            raise InputError("request.output_config must be an object", field="output_config")
        effort = output_config.get("effort")
        if effort is not None and effort not in EFFORTS:
            raise InputError(
                f"request.output_config.effort must be one of {list(EFFORTS)}, got {shown(effort)}",
                field="output_config",
            )
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    if thinking is not None and kind not in _THINKING_TYPES:
        raise InputError(
            f"request.thinking.type must be one of {list(_THINKING_TYPES)}, got {shown(kind)}", field="thinking"
        )
    if kind in ("disabled", "enabled"):
        return thinking_intent(thinking)
    if effort is not None:
        if effort == "max":
            notes.append("output_config.effort 'max' is past the top tier; sent as 'high'")
        return EFFORTS[effort]
    return "on" if kind == "adaptive" else None


# --- the thinking signature ---------------------------------------------------------------------------------------


def signature(thinking: str, key: bytes) -> str:
    """A thinking block's `signature`: `chatcaps1.` and the base64 HMAC-SHA256 of its text under the server's `key`,
    so that a block a client sends back can be checked as this server's."""
    digest = hmac.new(key, thinking.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return _SIGNATURE_PREFIX + base64.b64encode(digest).decode("ascii")


def verifies(thinking: str, signed: str, key: bytes) -> bool:
    """Whether `signed` is `thinking`'s signature under `key` (compared in constant time, as bytes: a client's
    signature may hold any text, which `compare_digest` refuses as a str)."""
    return hmac.compare_digest(signature(thinking, key).encode(), signed.encode("utf-8", "surrogatepass"))


# --- the response -------------------------------------------------------------------------------------------------


def message_id() -> str:
    """A fresh `msg_` id for one response (every event of a stream carries the same)."""
    return f"msg_{uuid.uuid4().hex}"


def tool_use_id() -> str:
    """A fresh `toolu_` id for a call whose text writes none: unique across the conversation, as Anthropic's are
    (a client keys the results it sends back by them)."""
    return f"toolu_{uuid.uuid4().hex[:24]}"


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def thinking_block(thinking: str, signed: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": thinking, "signature": signed}


def tool_use_block(ident: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": name, "input": dict(arguments)}


def stop_reason(server: str, *, called_tools: bool, stop_sequence: str | None) -> StopReason:
    """The backend's reason ("stop", "length") as Anthropic's: "max_tokens" at the limit, "stop_sequence" where a
    stop sequence ended it, "tool_use" where the model stopped after calling tools, else "end_turn"."""
    if server == "length":
        return "max_tokens"
    if stop_sequence is not None:
        return "stop_sequence"
    return "tool_use" if called_tools else "end_turn"


def usage(input_tokens: int, output_tokens: int, thinking_tokens: int | None = None) -> dict[str, Any]:
    """The token counts of one response; `thinking_tokens` where the reasoning was counted (hidden from the client)."""
    counts: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if thinking_tokens is not None:
        counts["output_tokens_details"] = {"thinking_tokens": thinking_tokens}
    return counts


def message(
    *,
    ident: str,
    model: str,
    content: Sequence[Mapping[str, Any]],
    stop_reason: StopReason | None,
    stop_sequence: str | None,
    usage: Mapping[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """A whole `message`; `extra` adds top-level fields (chatcaps' report)."""
    return {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(block) for block in content],
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": dict(usage),
        **extra,
    }


# --- the stream's events ------------------------------------------------------------------------------------------


def message_start(ident: str, model: str, input_tokens: int) -> dict[str, Any]:
    """The first event: the message, empty, with the prompt's token count."""
    empty = message(ident=ident, model=model, content=[], stop_reason=None, stop_sequence=None, usage=usage(0, 0))
    return {"type": "message_start", "message": {**empty, "usage": usage(input_tokens, 0)}}


def block_start(index: int, block: Mapping[str, Any]) -> dict[str, Any]:
    """A block opens: its empty form (a text block with "", a thinking block with "" and no signature yet, a
    tool_use block with its id, name and `{}`)."""
    return {"type": "content_block_start", "index": index, "content_block": dict(block)}


def text_delta(index: int, text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}


def thinking_delta(index: int, thinking: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": thinking}}


def signature_delta(index: int, signed: str) -> dict[str, Any]:
    """A thinking block's signature, sent once its text is whole, before the block stops."""
    return {"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": signed}}


def input_json_delta(index: int, piece: str) -> dict[str, Any]:
    """A piece of a tool_use block's input, as JSON text (the pieces joined are the input object)."""
    return {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(
    stop_reason: StopReason, stop_sequence: str | None, usage: Mapping[str, Any], **extra: Any
) -> dict[str, Any]:
    """The stream's end: why it stopped and the output's token count (`usage`: `output_tokens`, and
    `input_tokens`); `extra` adds fields (chatcaps' report)."""
    delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    return {"type": "message_delta", "delta": delta, "usage": dict(usage), **extra}


def message_stop() -> dict[str, Any]:
    return {"type": "message_stop"}


def ping() -> dict[str, Any]:
    return {"type": "ping"}


def token_count(input_tokens: int) -> dict[str, Any]:
    """`/v1/messages/count_tokens`'s answer."""
    return {"input_tokens": input_tokens}


def error(message: str, *, kind: ErrorType) -> dict[str, Any]:
    """Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_type(status: int) -> ErrorType:
    """The error `type` Anthropic gives an HTTP status."""
    return ERROR_TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "api_error")


def model_info(model: str, created: int) -> dict[str, Any]:
    """One model as Anthropic's `/v1/models` lists it."""
    stamp = datetime.fromtimestamp(created, UTC).isoformat().replace("+00:00", "Z")
    return {"type": "model", "id": model, "display_name": model, "created_at": stamp, "lifecycle": "active"}


def with_model_info(listing: Mapping[str, Any], created: int) -> dict[str, Any]:
    """OpenAI's model list (`wire.openai.model_list`) with Anthropic's fields added, so that one answer serves both
    clients: each entry's `type`, `display_name`, `created_at`, and the page's `has_more`, `first_id`, `last_id`."""
    data = [{**entry, **model_info(entry["id"], created)} for entry in listing["data"]]
    ids = [entry["id"] for entry in data]
    page = {"has_more": False, "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None}
    return {**listing, "data": data, **page}
