"""What every polyfill step shares: the request it rewrites, the record of a change, and the step signature.

Steps are pure: they take a `Request` and Caps and return a new `Request`, never touching the caller's dicts (a changed
message is a new dict; unchanged ones are passed along as they are). A step that changes nothing returns the request
it was given, with no records: every change is recorded, so no record means no change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from chatcaps.caps import Caps
from chatcaps.intent import Intent

Message = dict[str, Any]
Messages = tuple[Message, ...]
Tool = dict[str, Any]
NO_ARGS: Mapping[str, Any] = MappingProxyType({})
LISTS = (list, tuple)
"""What a list in plain data is (messages, tools, blocks, calls): `plain_data` keeps tuples. A tuple of types, as
`isinstance` with `list | tuple` builds the union at every call."""


@dataclass(frozen=True)
class Request:
    """The part of a render request polyfills rewrite."""

    messages: Messages
    tools: tuple[Tool, ...] | None = None

    def __init__(self, messages: Messages, tools: tuple[Tool, ...] | None = None) -> None:
        # Written to the instance's dict: the generated `__init__` of a frozen dataclass sets each field through
        # `object.__setattr__`, a measurable part of a render at several requests (and records) per render.
        fields = self.__dict__
        fields["messages"] = messages
        fields["tools"] = tools


@dataclass(frozen=True)
class Options:
    """What the caller asked for besides the messages and tools (`ChatTemplate.render`'s arguments)."""

    separator: str = "\n"
    """Joins text blocks when typed content becomes a string."""
    reasoning: Intent = None
    """The reasoning intent (`reasoning=`), checked."""
    template_args: Mapping[str, Any] = field(default_factory=lambda: NO_ARGS)
    """The caller's template variables, as plain data; they win over what the intent would pass."""
    prefill: bool = True
    """The prompt ends in a generation prompt, so the intent may append text to it."""
    continued: bool = False
    """The final message is continued (`continue_final_message`): a reasoning block the polyfills write into its
    content, where it has no content yet, is left open, so the model goes on inside it."""


@dataclass(frozen=True)
class Applied:
    """One change a polyfill made, for `RenderResult.applied`."""

    polyfill: str
    detail: str

    def __init__(self, polyfill: str, detail: str) -> None:
        fields = self.__dict__  # as `Request.__init__`, for the same reason
        fields["polyfill"] = polyfill
        fields["detail"] = detail

    def to_dict(self) -> dict[str, str]:
        return {"polyfill": self.polyfill, "detail": self.detail}


Outcome = tuple[Request, tuple[Applied, ...]]
Polyfill = Callable[[Request, Caps, Options], Outcome]

json_text: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode
"""`json.dumps(value, ensure_ascii=False)`, without building an encoder per call."""


def text_of(content: Any, separator: str = "\n") -> str:
    """The text a content value carries: a string, or its text blocks joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return separator.join(str(block.get("text", "")) for block in content if block.get("type") == "text")


def with_text(content: Any, text: str, *, before: bool = True, separator: str = "\n\n") -> Any:
    """`content` with `text` added before (or after) it, keeping its shape (a string, or a list of blocks)."""
    if content is None or content == "":
        return text
    if isinstance(content, str):
        return f"{text}{separator}{content}" if before else f"{content}{separator}{text}"
    block = {"type": "text", "text": text}
    return [block, *content] if before else [*content, block]
