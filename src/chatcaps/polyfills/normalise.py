"""`normalise`: canonical spellings before any template-specific step.

Reasoning aliases (`reasoning`, `thinking`) become `reasoning_content`; OpenAI `image_url` and `input_audio` blocks
become `image` and `audio` blocks; None-valued keys (other than `content`) and empty `tool_calls` are dropped.
"""

from __future__ import annotations

from typing import Any

from chatcaps.caps import Caps
from chatcaps.polyfills.base import LISTS, Applied, Message, Options, Outcome, Request
from chatcaps.vocab import REASONING_ALIASES, REASONING_CONTENT

NAME = "normalise"
RENAMED = frozenset({"image_url", "input_audio"})
"""The block types `normalise` respells."""
ALIASES = frozenset(REASONING_ALIASES)
"""The reasoning fields `normalise` renames to `reasoning_content`."""


def normalise(request: Request, caps: Caps, options: Options) -> Outcome:
    applied: list[Applied] = []
    messages: list[Message] | None = None  # copied at the first message that changes: most requests have none
    for index, message in enumerate(request.messages):
        if changes(message):
            if messages is None:
                messages = list(request.messages)
            messages[index] = _message(index, message, applied)
    if messages is None:
        return request, ()
    return Request(tuple(messages), request.tools), tuple(applied)


def changes(message: Message) -> bool:
    """Whether `normalise` would change `message`: a quick look, as most messages are canonical already (and the
    rule `validate_messages` says a request is canonical by)."""
    if not ALIASES.isdisjoint(message):
        return True
    content = message.get("content")
    if type(content) is not str and isinstance(content, LISTS) and any(map(_renamed, content)):
        return True
    # None and [] are falsy, and most messages have no falsy value (but an empty content): `all` rules them out at once.
    values = message.values()
    return not all(values) and (
        message.get("tool_calls") == []
        or (None in values and any(value is None for key, value in message.items() if key != "content"))
    )


def _renamed(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in RENAMED


def _message(index: int, message: Message, applied: list[Applied]) -> Message:
    """A changed copy of `message`, which `normalise` `changes` (each change is recorded in `applied`)."""
    changed = dict(message)
    if None in changed.values():  # rarely: one look before a walk over the keys
        dropped = [key for key, value in message.items() if value is None and key != "content"]
        for key in dropped:
            del changed[key]
        if dropped:
            applied.append(Applied(NAME, f"messages[{index}]: dropped None-valued {', '.join(dropped)}"))
    if changed.get("tool_calls") == []:
        del changed["tool_calls"]
        applied.append(Applied(NAME, f"messages[{index}]: dropped empty tool_calls"))
    if not ALIASES.isdisjoint(changed):
        for alias in REASONING_ALIASES:
            if alias not in changed:
                continue
            value = changed.pop(alias)
            if REASONING_CONTENT in changed:
                applied.append(Applied(NAME, f"messages[{index}]: dropped {alias} (reasoning_content is set)"))
            else:
                changed[REASONING_CONTENT] = value
                applied.append(Applied(NAME, f"messages[{index}]: {alias} -> reasoning_content"))
    content = changed.get("content")
    if type(content) is not str and isinstance(content, LISTS):
        renamed = []
        blocks = []
        for block in content:
            new = _block(block)
            if new is not block:
                renamed.append(f"{block['type']} -> {new['type']}")
            blocks.append(new)
        if renamed:
            changed["content"] = blocks
            applied.append(Applied(NAME, f"messages[{index}].content: {', '.join(renamed)}"))
    return changed


def _block(block: dict[str, Any]) -> dict[str, Any]:
    """OpenAI block spellings as Hugging Face templates read them."""
    kind = block.get("type")
    if kind not in RENAMED:
        return block
    rest = dict(block)  # the other keys, in their order
    del rest["type"]
    if kind == "image_url":
        image = rest.pop("image_url", None)
        url = image.get("url") if isinstance(image, dict) else image
        return {"type": "image", "url": url, **rest}
    audio = rest.pop("input_audio", None)
    data = audio if isinstance(audio, dict) else {"data": audio}
    found = {"base64": data.get("data"), "format": data.get("format")}
    return {"type": "audio", **{key: value for key, value in found.items() if value is not None}, **rest}
