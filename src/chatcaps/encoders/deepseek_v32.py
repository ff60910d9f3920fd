# ruff: noqa: RUF001, RUF002 -- the format's own tokens are written with FULLWIDTH VERTICAL LINE (U+FF5C)
"""DeepSeek-V3.2's prompt format (DSML), written from its behaviour and the reference encoder's test vectors.

DeepSeek-V3.2 ships no chat template: its prompt is defined by a Python encoder (`encoding/encoding_dsv32.py`). This is
chatcaps' own rendering of that format, proven equal to the reference over `../shared/encoders/deepseek-v3.2`:

- `<｜begin▁of▁sentence｜>`, then each message: a system message's text (with its tools and response format), a
  user turn `<｜User｜>text<｜Assistant｜>` followed by the thinking opener, a developer turn written as a user turn
  whose text follows its tools, an assistant message `[reasoning</think>]content[calls]<｜end▁of▁sentence｜>`,
  tool results in one `<function_results>` block per run of tool messages, followed by the thinking opener;
- the thinking opener is `<think>` in thinking mode after the last user turn, else `</think>` (the turn's reasoning
  closed before it starts): reasoning before the last user turn is never written;
- calls are DSML, each parameter typed `string="true"` (written as is) or `string="false"` (JSON).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from chatcaps.errors import InputError

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_START = "<think>"
THINK_END = "</think>"
DSML = "｜DSML｜"
THINKING_MODES = ("chat", "thinking")

_TOOLS_HEADER = f"""

## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{DSML}function_calls>" block like the following as part of your reply to the user:
<{DSML}function_calls>
<{DSML}invoke name="$FUNCTION_NAME">
<{DSML}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{DSML}parameter>
...
</{DSML}invoke>
<{DSML}invoke name="$FUNCTION_NAME2">
...
</{DSML}invoke>
</{DSML}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{DSML}function_calls>
...
</{DSML}function_calls>
<function_results>
...
</function_results>
{THINK_START}...thinking about results{THINK_END}
Here are the functions available in JSONSchema format:
<functions>
"""  # noqa: E501 -- the format's own text, one line as the model reads it
_RESPONSE_FORMAT = "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
_DEVELOPER_TEXT = "\n\n# The user's message is: "
_USER_ROLES = frozenset({"user", "developer"})


def encode(
    messages: Sequence[Mapping[str, Any]],
    *,
    thinking: bool,
    tools: Sequence[Any] | None = None,
    generation_prompt: bool = True,
) -> str:
    """The prompt for `messages` in the reference's input shape (tools may ride on a system or developer message's
    `tools`), in thinking mode or chat mode. A request's `tools` are written as servers place them, as a new system
    message before the first. Without `generation_prompt`, the opening of the next assistant turn that follows a
    final user, developer or tool message is left out. Bad input raises `InputError` naming the message (its index
    in `messages`) and the field."""
    last_user = max((i for i, message in enumerate(messages) if message.get("role") in _USER_ROLES), default=-1)
    parts = [BOS, _extras({"tools": tools}, None) if tools else ""]
    for index, message in enumerate(messages):
        opener = THINK_START if thinking and index >= last_user else THINK_END
        final = index == len(messages) - 1
        role = message.get("role")
        if role == "system":
            parts.append(_text(message, index) + _extras(message, index))
        elif role in _USER_ROLES:
            parts.append(USER + _user_text(message, index))
            if generation_prompt or not final:
                parts.append(ASSISTANT + opener)
        elif role == "assistant":
            parts.append(_assistant(message, index, thinking and index > last_user))
        elif role == "tool":
            parts.append(_tool(messages, index))
            if final or messages[index + 1].get("role") != "tool":
                parts.append("\n</function_results>\n\n")
                if generation_prompt or not final:
                    parts.append(opener)
        else:
            raise InputError(
                f"unknown role {role!r}: the format has system, user, developer, assistant and tool",
                index=index,
                field="role",
            )
    return "".join(parts)


def _text(message: Mapping[str, Any], index: int, field: str = "content") -> str:
    value = message.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__}", index=index, field=field)
    return value


def _extras(message: Mapping[str, Any], index: int | None) -> str:
    """The tools and the response format a system or developer message carries, in that order."""
    text = ""
    tools = message.get("tools")
    if tools:
        text += _TOOLS_HEADER + "".join(_dumps(_function(tool, index)) + "\n" for tool in tools) + "</functions>\n"
    response_format = message.get("response_format")
    if response_format:
        text += _RESPONSE_FORMAT + _dumps(response_format)
    return text


def _user_text(message: Mapping[str, Any], index: int) -> str:
    text = _text(message, index)
    if message.get("role") != "developer":
        return text
    if not text:
        raise InputError("a developer message needs text", index=index, field="content")
    return _extras(message, index) + _DEVELOPER_TEXT + text


def _assistant(message: Mapping[str, Any], index: int, after_last_user: bool) -> str:
    """An assistant message: its reasoning where it follows the last user turn in thinking mode (which requires
    reasoning or calls there), its content, its calls and the end of sentence."""
    calls = message.get("tool_calls") or ()
    reasoning = _text(message, index, "reasoning_content")
    text = ""
    if after_last_user:
        if not reasoning and not calls:
            raise InputError(
                "in thinking mode an assistant message after the last user turn needs reasoning_content or tool_calls",
                index=index,
                field="reasoning_content",
            )
        text = reasoning + THINK_END
    text += _text(message, index)
    if calls:
        invokes = "\n".join(_invoke(call, index, at) for at, call in enumerate(calls))
        text += f"\n\n<{DSML}function_calls>\n{invokes}\n</{DSML}function_calls>"
    return text + EOS


def _invoke(call: Any, index: int, at: int) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise InputError(f"tool_calls[{at}] needs a function with a name", index=index, field="tool_calls")
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise InputError(f"tool_calls[{at}]: arguments are not JSON", index=index, field="tool_calls") from None
    if not isinstance(arguments, Mapping):
        raise InputError(f"tool_calls[{at}]: arguments must be an object", index=index, field="tool_calls")
    parameters = "\n".join(_parameter(key, value) for key, value in arguments.items())
    return f'<{DSML}invoke name="{function["name"]}">\n{parameters}\n</{DSML}invoke>'


def _parameter(key: str, value: Any) -> str:
    typed = "true" if isinstance(value, str) else "false"
    text = value if isinstance(value, str) else _dumps(value)
    return f'<{DSML}parameter name="{key}" string="{typed}">{text}</{DSML}parameter>'


def _tool(messages: Sequence[Mapping[str, Any]], index: int) -> str:
    """One tool result, opening the results block where it is the first of its run; the run must follow an
    assistant message with calls."""
    first = index == 0 or messages[index - 1].get("role") != "tool"
    start = index
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    caller = messages[start - 1] if start > 0 else None
    if caller is None or caller.get("role") != "assistant" or not caller.get("tool_calls"):
        raise InputError("a tool result must follow an assistant message with tool_calls", index=index, field="role")
    result = f"<result>{_text(messages[index], index)}</result>"
    return ("\n\n<function_results>\n" if first else "\n") + result


def _function(tool: Any, index: int | None) -> Any:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    if function is None:
        raise InputError("each tool needs a function", index=index, field="tools")
    return function


def _dumps(value: Any) -> str:
    """JSON as the format writes it: `, ` and `: ` separators, text unescaped."""
    return json.dumps(value, ensure_ascii=False)
