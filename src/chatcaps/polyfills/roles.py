"""`roles`: roles the template lacks, mapped onto ones it has.

developer -> system when the template drops developer turns; a leading system turn merged into the first user turn
when it has no system role; later (inline) system turns merged into the next user turn when it drops them; and
consecutive user or assistant turns merged when it requires alternation.
"""

from __future__ import annotations

from typing import Any

from chatcaps.caps import Caps
from chatcaps.polyfills.base import Applied, Message, Options, Outcome, Request
from chatcaps.vocab import REASONING_CONTENT

NAME = "roles"
JOIN = "\n\n"


def roles(request: Request, caps: Caps, options: Options) -> Outcome:
    applied: list[Applied] = []
    messages = list(request.messages)
    if not caps.roles.developer:
        for index, message in enumerate(messages):
            if message["role"] == "developer":
                messages[index] = {**message, "role": "system"}
                applied.append(Applied(NAME, f"messages[{index}]: developer -> system"))
    if not caps.roles.system and messages and messages[0]["role"] == "system":
        messages = _into_next_user(messages, 0)
        applied.append(Applied(NAME, "messages[0]: system merged into the first user turn"))
    if not caps.roles.system_inline:
        index = 1
        while index < len(messages):
            if messages[index]["role"] != "system":
                index += 1
                continue
            messages = _into_next_user(messages, index)
            applied.append(Applied(NAME, f"messages[{index}]: inline system merged into the next user turn"))
    if caps.roles.requires_alternation:
        messages = _alternate(messages, applied)
    if not applied:
        return request, ()
    return Request(tuple(messages), request.tools), tuple(applied)


def merge_content(first: Any, second: Any) -> Any:
    """Two turns' content as one, in order: strings joined by a blank line, block lists concatenated."""
    if first is None or first == "" or first == []:
        return second
    if second is None or second == "" or second == []:
        return first
    if isinstance(first, str) and isinstance(second, str):
        return first + JOIN + second
    return _blocks(first) + _blocks(second)


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _into_next_user(messages: list[Message], index: int) -> list[Message]:
    """The system turn at `index` prefixed to the next user turn (or turned into a user turn when none follows)."""
    system = messages[index]
    rest = messages[index + 1 :]
    target = next((offset for offset, message in enumerate(rest) if message["role"] == "user"), None)
    if target is None:
        return [*messages[:index], {"role": "user", "content": system.get("content")}, *rest]
    user = rest[target]
    rest[target] = {**user, "content": merge_content(system.get("content"), user.get("content"))}
    return [*messages[:index], *rest]


def _alternate(messages: list[Message], applied: list[Applied]) -> list[Message]:
    merged: list[Message] = []
    for index, message in enumerate(messages):
        previous = merged[-1] if merged else None
        if previous is not None and previous["role"] == message["role"] and message["role"] in ("user", "assistant"):
            merged[-1] = _merge_turns(previous, message)
            applied.append(Applied(NAME, f"messages[{index}]: merged into the {message['role']} turn before it"))
        else:
            merged.append(message)
    return merged


def _merge_turns(first: Message, second: Message) -> Message:
    combined = {**second, **first, "content": merge_content(first.get("content"), second.get("content"))}
    calls = [*(first.get("tool_calls") or []), *(second.get("tool_calls") or [])]
    if calls:
        combined["tool_calls"] = calls
    reasoning = [text for text in (first.get(REASONING_CONTENT), second.get(REASONING_CONTENT)) if text]
    if reasoning:
        combined[REASONING_CONTENT] = JOIN.join(reasoning)
    return combined
