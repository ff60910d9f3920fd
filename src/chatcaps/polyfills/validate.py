"""Checking canonical input before any polyfill runs: bad input raises `InputError` naming the message
index and field, whatever polyfills are switched off.

Messages and tools are checked as `plain_data` left them, so the only containers are dict, list and tuple: the checks
test those concrete types (an isinstance against a collections.abc class costs several times more, per field).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from chatcaps.caps import Caps
from chatcaps.errors import InputError
from chatcaps.polyfills.base import LISTS
from chatcaps.polyfills.normalise import changes
from chatcaps.vocab import REASONING_FIELDS, REASONING_KEYS, RESERVED_ARGS, shown

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def listed(value: Any, name: str) -> list[Any]:
    """`list(value)`; a value that is not iterable is bad input, not a TypeError."""
    if type(value) is list:  # the usual value, without the slower isinstance against an ABC
        return list(value)
    if not isinstance(value, Iterable):
        raise InputError(f"{name} must be a list, got {type(value).__name__}")
    return list(value)


def validate_messages(messages: Any, caps: Caps) -> tuple[bool, bool, bool]:
    """Check `messages`, and say in the same pass what the pipeline may leave out: whether every turn is a role and a
    string content only (a text chat, `is_text_chat` but for the tools), whether `normalise` would change nothing
    (`canonical`: no message it `changes`), and whether no turn has tool calls, a tool result or a reasoning field (a
    content-only chat, `is_content_only` but for the tools)."""
    if not isinstance(messages, LISTS):
        raise InputError(f"messages must be a list of dicts, got {type(messages).__name__}")
    call_ids: set[str] = set()
    calls_seen = False
    text_chat = canonical = content_only = True
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InputError(f"a message must be a dict, got {type(message).__name__}", index=index)
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise InputError(f"unknown role {shown(role)}; expected one of {sorted(ROLES)}", index=index, field="role")
        content = message.get("content")
        if type(content) is str and len(message) == 2:  # a role and a text: most turns, with nothing else to check
            if role == "tool":
                content_only = False
                _check_tool_message(message, index, caps, call_ids, calls_seen)
            continue
        text_chat = False
        if content is not None and not isinstance(content, str):
            _check_content(content, index)
        if canonical and changes(message):
            canonical = False
        if not REASONING_KEYS.isdisjoint(message):  # most messages have none: one look at the keys
            content_only = False
            for name in REASONING_FIELDS:
                value = message.get(name)
                if value is not None and not isinstance(value, str):
                    raise InputError(f"must be a string, got {type(value).__name__}", index=index, field=name)
        if "tool_calls" in message:
            for position, call in enumerate(_tool_calls(message, index)):
                calls_seen = True
                call_id = call.get("id") if isinstance(call, dict) else None
                if type(call_id) is str:  # the usual case, taken before building a field name for an error
                    call_ids.add(call_id)
                elif call_id is not None:
                    call_ids.add(_call_id(call_id, index, f"tool_calls[{position}].id"))
                _check_call(call, index, position)
        if role == "tool":
            content_only = False
            _check_tool_message(message, index, caps, call_ids, calls_seen)
    return text_chat, canonical, content_only and not calls_seen


def validate_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, LISTS):
        raise InputError(f"tools must be a list of dicts, got {type(tools).__name__}")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InputError(f'tools[{index}] must be {{"type": "function", "function": {{"name": ...}}}}')


def validate_template_args(template_args: Any) -> None:
    if template_args is None or (type(template_args) is dict and not template_args):  # the usual values
        return
    mapping = type(template_args) is dict or isinstance(template_args, Mapping)  # the exact type first: quicker
    if not mapping or not all(type(key) is str or isinstance(key, str) for key in template_args):
        raise InputError("template_args must be a dict with string keys")
    reserved = RESERVED_ARGS.intersection(template_args)
    if reserved:
        raise InputError(f"template_args may not set {sorted(reserved)}: render() takes them as its own arguments")
    try:
        orjson.dumps(template_args, default=repr)  # as ChatTemplate keys its cache of generation prompts
    except orjson.JSONEncodeError as error:
        raise InputError(f"template_args cannot be written as JSON: {error}") from None


def json_object(text: str) -> dict[str, Any] | None:
    """`text` parsed, when it is a JSON object; else None (`parse_arguments` then says what is wrong)."""
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return parsed if type(parsed) is dict else None


def parse_arguments(arguments: str, index: int, field: str) -> dict[str, Any]:
    """A call's JSON string arguments as an object; anything else is bad input."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError as error:
        raise InputError(f"arguments are not valid JSON ({error})", index=index, field=field) from None
    if not isinstance(parsed, dict):
        raise InputError(f"arguments must be a JSON object, got {type(parsed).__name__}", index=index, field=field)
    return parsed


def _check_content(content: Any, index: int) -> None:
    """Check a content value that is neither None nor a string."""
    if not isinstance(content, LISTS):
        raise InputError(
            f"content must be a string, None or a list of blocks, got {type(content).__name__}",
            index=index,
            field="content",
        )
    for position, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            raise InputError(
                'a content block must be a dict with a string "type"', index=index, field=f"content[{position}]"
            )
        if kind == "text" and not isinstance(block.get("text"), str):
            raise InputError('a text block needs a string "text"', index=index, field=f"content[{position}].text")


def _tool_calls(message: Mapping[str, Any], index: int) -> Sequence[Any]:
    calls = message.get("tool_calls")
    if calls is None:
        return ()
    if not isinstance(calls, LISTS):
        raise InputError(f"must be a list, got {type(calls).__name__}", index=index, field="tool_calls")
    if calls and message.get("role") != "assistant":
        raise InputError("only assistant messages carry tool calls", index=index, field="tool_calls")
    return calls


def _check_call(call: Any, index: int, position: int) -> None:
    """`tool_calls[position]` of message `index` (its field names are built only for an error: this runs per call)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InputError(
            'a tool call must be {"function": {"name": str, "arguments": ...}}',
            index=index,
            field=f"tool_calls[{position}]",
        )
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        if json_object(arguments) is None:
            parse_arguments(arguments, index, f"tool_calls[{position}].function.arguments")  # raises, saying why
    elif arguments is not None and not isinstance(arguments, dict):
        raise InputError(
            f"must be a JSON string or a dict, got {type(arguments).__name__}",
            index=index,
            field=f"tool_calls[{position}].function.arguments",
        )


def _check_tool_message(
    message: Mapping[str, Any], index: int, caps: Caps, call_ids: set[str], calls_seen: bool
) -> None:
    if not calls_seen:
        raise InputError("a tool message needs an earlier assistant tool call", index=index, field="role")
    call_id = message.get("tool_call_id")
    if call_id is None:
        if caps.tools.call_id:
            raise InputError(
                "this template writes call ids: the tool message needs the id of the call it answers",
                index=index,
                field="tool_call_id",
            )
        return
    if _call_id(call_id, index, "tool_call_id") not in call_ids:
        raise InputError(f"no earlier tool call has id {shown(call_id)}", index=index, field="tool_call_id")


def _call_id(call_id: Any, index: int, field: str) -> str:
    """A call id as the string it is compared as; ids are strings (some clients send numbers)."""
    if type(call_id) is str:
        return call_id
    if isinstance(call_id, str | int):
        return str(call_id)
    raise InputError(f"must be a string, got {type(call_id).__name__}", index=index, field=field)
