"""`tools`: tools for templates that cannot render them natively.

Each part is polyfilled only where Caps say it does not render: definitions are described in the system turn,
assistant tool calls are written into the assistant's content as JSON lines, and tool results become user turns.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import orjson

from chatcaps.caps import Caps
from chatcaps.polyfills.base import Applied, Message, Options, Outcome, Request, json_text, text_of, with_text
from chatcaps.polyfills.validate import json_object, parse_arguments
from chatcaps.vocab import REASONING_CONTENT

NAME = "tools"
INSTRUCTIONS = (
    "You can call the following tools. To call one, reply with a JSON object on its own line: "
    '{"name": <tool name>, "arguments": <arguments object>}.'
)


# A server sends the same tool definitions with every request, and each past tool call again with every later turn:
# the JSON text of both is cached, as writing it costs far more than a lookup. Each cache holds at most about 8 MiB.
_CACHED_TOOLS_BYTES = 256 * 1024
_CACHED_ARGUMENTS_CHARS = 4 * 1024


def describe_tools(tools: tuple[dict[str, Any], ...]) -> str:
    """The system-turn text for tool definitions: instructions, then one JSON line per function."""
    try:
        key = orjson.dumps(tools)
    except orjson.JSONEncodeError:  # a key that is not a string, an integer past 64 bits: not cached
        return _describe(tools)
    # orjson writes NaN and the infinities as null, so a key with a null could stand for either: not cached.
    if len(key) > _CACHED_TOOLS_BYTES or b"null" in key:
        return _describe(tools)
    return _described(key)


@lru_cache(maxsize=16)
def _described(key: bytes) -> str:
    """`_describe` of the tools `key` is the orjson text of: read back, they write the same JSON."""
    return _describe(orjson.loads(key))


def _describe(tools: Sequence[dict[str, Any]]) -> str:
    lines = [json_text(tool.get("function", tool)) for tool in tools]
    return "\n".join([INSTRUCTIONS, *lines])


def call_text(call: dict[str, Any], index: int, position: int) -> str:
    """One tool call as the JSON line `describe_tools` asks the model to write."""
    function = call["function"]
    name, arguments = function["name"], function.get("arguments")
    if type(name) is str and type(arguments) is str and len(arguments) <= _CACHED_ARGUMENTS_CHARS:
        line = _string_call_text(name, arguments)
        if line is not None:
            return line
    if isinstance(arguments, str):
        arguments = parse_arguments(arguments, index, f"tool_calls[{position}].function.arguments")
    return json_text({"name": name, "arguments": arguments or {}})


@lru_cache(maxsize=1024)
def _string_call_text(name: str, arguments: str) -> str | None:
    """`call_text` of a call whose arguments are a JSON string; None when they are not a JSON object."""
    parsed = json_object(arguments)
    return None if parsed is None else json_text({"name": name, "arguments": parsed or {}})


def tools(request: Request, caps: Caps, options: Options) -> Outcome:
    support = caps.tools
    applied: list[Applied] = []
    messages = list(request.messages)
    kept_tools = request.tools
    if request.tools and not support.definitions:
        text = describe_tools(request.tools)
        if messages and messages[0]["role"] in ("system", "developer"):
            messages[0] = {**messages[0], "content": with_text(messages[0].get("content"), text, before=False)}
        else:
            messages.insert(0, {"role": "system", "content": text})
        kept_tools = None
        applied.append(Applied(NAME, f"{len(request.tools)} tool definition(s) described in the system turn"))
    if not (support.calls and support.responses):
        for index, message in enumerate(messages):
            if message.get("tool_calls") and not support.calls:
                messages[index] = _calls_as_text(message, index)
                applied.append(Applied(NAME, f"messages[{index}]: tool calls written as JSON text in content"))
            elif message["role"] == "tool" and not support.responses:
                messages[index] = _result_as_user(message)
                applied.append(Applied(NAME, f"messages[{index}]: tool result sent as a user turn"))
    if support.calls and not support.parallel_calls:
        messages = _one_call_per_turn(messages, applied)
    if support.short_call_ids:
        messages = _short_ids(messages, applied)
    if kept_tools is None and support.requires_list:
        kept_tools = ()
        applied.append(Applied(NAME, "tools=[] passed for tools=None (the template iterates tools even when empty)"))
    if not applied:
        return request, ()
    return Request(tuple(messages), kept_tools), tuple(applied)


@lru_cache(maxsize=4096)
def short_id(call_id: str) -> str:
    """A 9-character alphanumeric id standing for `call_id`, the same every time (for templates that require it)."""
    if len(call_id) == 9 and call_id.isalnum() and call_id.isascii():
        return call_id
    digest = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    letters = string.ascii_letters + string.digits
    return "".join(letters[(digest >> (6 * place)) % len(letters)] for place in range(9))


def _short_ids(messages: list[Message], applied: list[Applied]) -> list[Message]:
    rewritten = []
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls and any("id" in call and short_id(str(call["id"])) != call["id"] for call in calls):
            calls = [{**call, "id": short_id(str(call["id"]))} if "id" in call else call for call in calls]
            message = {**message, "tool_calls": calls}
            applied.append(Applied(NAME, f"messages[{index}]: call ids shortened to 9 alphanumerics"))
        call_id = message.get("tool_call_id")
        if call_id is not None and short_id(str(call_id)) != call_id:
            message = {**message, "tool_call_id": short_id(str(call_id))}
            applied.append(Applied(NAME, f"messages[{index}]: tool_call_id shortened to 9 alphanumerics"))
        rewritten.append(message)
    return rewritten


def _one_call_per_turn(messages: list[Message], applied: list[Applied]) -> list[Message]:
    """Parallel calls as a sequence of one-call turns, each followed by its result (results matched by call id, else
    by order)."""
    out: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        calls = message.get("tool_calls") or []
        if len(calls) < 2:
            out.append(message)
            index += 1
            continue
        end = index + 1
        while end < len(messages) and messages[end]["role"] == "tool":
            end += 1
        results = list(messages[index + 1 : end])
        for position, call in enumerate(calls):
            turn = {**message, "tool_calls": [call]}
            if position:
                turn = {key: value for key, value in turn.items() if key not in (REASONING_CONTENT, "content")}
                turn["content"] = message.get("content") if message.get("content") is None else ""
            out.append(turn)
            match = next((result for result in results if result.get("tool_call_id") == call.get("id")), None)
            if match is None and results and not any(result.get("tool_call_id") for result in results):
                match = results[0]
            if match is not None:
                results.remove(match)
                out.append(match)
        out.extend(results)
        applied.append(Applied(NAME, f"messages[{index}]: {len(calls)} parallel calls sent as one call per turn"))
        index = end
    return out


def _calls_as_text(message: Message, index: int) -> Message:
    lines = [call_text(call, index, position) for position, call in enumerate(message["tool_calls"])]
    changed = dict(message)
    del changed["tool_calls"]
    text = "\n".join(lines)
    changed["content"] = with_text(message.get("content"), text, before=False, separator="\n")
    return changed


def _result_as_user(message: Message) -> Message:
    label = " ".join(str(message[key]) for key in ("name", "tool_call_id") if message.get(key))
    header = f"Tool result ({label}):" if label else "Tool result:"
    return {"role": "user", "content": f"{header}\n{text_of(message.get('content'))}"}
