"""`tool_arguments`: tool-call arguments in the shape the template renders correctly.

A template that prints `arguments | tojson` needs an object (a string would come out escaped); one that prints
`arguments` as is needs a JSON string (an object would come out as a Python repr).
"""

from __future__ import annotations

from typing import Any

from chatcaps.caps import Caps
from chatcaps.polyfills.base import Applied, Options, Outcome, Request, json_text
from chatcaps.polyfills.validate import parse_arguments

NAME = "tool_arguments"


def tool_arguments(request: Request, caps: Caps, options: Options) -> Outcome:
    wanted = caps.tools.arguments
    if wanted not in ("object", "string"):
        return request, ()
    applied: list[Applied] = []
    messages = list(request.messages)
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        if not calls:
            continue
        reshaped = [_reshape(call, wanted, index, position) for position, call in enumerate(calls)]
        if any(new is not old for new, old in zip(reshaped, calls, strict=True)):
            messages[index] = {**message, "tool_calls": reshaped}
            what = "parsed from JSON strings to objects" if wanted == "object" else "dumped from objects to JSON"
            applied.append(Applied(NAME, f"messages[{index}]: tool call arguments {what}"))
    if not applied:
        return request, ()
    return Request(tuple(messages), request.tools), tuple(applied)


def _reshape(call: dict[str, Any], wanted: str, index: int, position: int) -> dict[str, Any]:
    function = call["function"]
    arguments = function.get("arguments")
    if wanted == "object" and isinstance(arguments, str):
        new: Any = parse_arguments(arguments, index, f"tool_calls[{position}].function.arguments")
    elif wanted == "string" and isinstance(arguments, dict):
        new = json_text(arguments)
    else:
        return call
    return {**call, "function": {**function, "arguments": new}}
