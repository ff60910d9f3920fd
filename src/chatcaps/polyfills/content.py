"""`content`: message content in the shape the template renders.

Strings become a text block for templates that read only blocks; block lists become one string (text blocks joined
by `Options.separator`) for templates that would print their repr; blocks of a kind the template never renders are
dropped with a record; None becomes "" where the template would fail on it or print "None".
"""

from __future__ import annotations

from typing import Any

from chatcaps.caps import Caps
from chatcaps.polyfills.base import Applied, Options, Outcome, Request, text_of
from chatcaps.vocab import BLOCK_FORMS

NAME = "content"
_STRING_ROLES = frozenset({"system", "developer"})
"""Typed content is probed on user turns; many templates print system text as is, so it goes as a string. An
assistant turn's blocks go as a string where the template prints them as a list (`Caps.content.typed_assistant`)."""


def content(request: Request, caps: Caps, options: Options) -> Outcome:
    applied: list[Applied] = []
    # What `_reshape` leaves alone, told apart before a call: strings where blocks are not required, None where it
    # may stay None.
    keep_strings, keep_none = not caps.content.requires_typed, not caps.content.requires_non_null
    messages = list(request.messages)
    for index, message in enumerate(messages):
        value = message.get("content")
        if caps.tools.calls_need_null_content and message.get("tool_calls") and value in (None, ""):
            if value == "":  # the template writes the calls only for None content
                messages[index] = {**message, "content": None}
                applied.append(Applied(NAME, f"messages[{index}]: empty content of a tool-call turn sent as None"))
            continue
        if (keep_strings and type(value) is str) or (keep_none and value is None):
            continue
        joined = message["role"] in _STRING_ROLES or (
            message["role"] == "assistant" and not caps.content.typed_assistant
        )
        if joined and isinstance(value, list) and caps.content.string:
            new, detail = text_of(value, options.separator), _joined(message["role"], value)
        else:
            new, detail = _reshape(value, caps, options)
        if detail:
            messages[index] = {**message, "content": new}
            applied.append(Applied(NAME, f"messages[{index}]: {detail}"))
    if not applied:
        return request, ()
    return Request(tuple(messages), request.tools), tuple(applied)


def _joined(role: str, blocks: list[dict[str, Any]]) -> str:
    """The record of a turn's blocks joined into its text, naming the blocks that carried none."""
    kind = "system" if role == "developer" else role
    dropped = [block["type"] for block in blocks if block["type"] != "text"]
    note = f"; dropped {', '.join(dropped)} block(s) the template does not render there" if dropped else ""
    return f"{kind} text blocks joined into a string{note}"


def _shown(caps: Caps) -> set[str]:
    """The block types the template renders."""
    shown = {"text", *caps.content.block_types}
    if caps.reasoning.format in BLOCK_FORMS:
        shown.add(BLOCK_FORMS[caps.reasoning.format][0])
    return shown


def _reshape(value: Any, caps: Caps, options: Options) -> tuple[Any, str]:
    if value is None:
        return ("", "None content sent as an empty string") if caps.content.requires_non_null else (None, "")
    if isinstance(value, str):
        if caps.content.requires_typed:
            return [{"type": "text", "text": value}], "string content sent as a text block"
        return value, ""
    shown = _shown(caps)
    dropped = [block["type"] for block in value if block["type"] not in shown]
    note = f"dropped {', '.join(dropped)} block(s) the template does not render" if dropped else ""
    if not caps.content.typed and caps.content.string:
        joined = "joined text blocks into a string" + (f"; {note}" if note else "")
        return text_of(value, options.separator), joined
    if dropped:
        return [block for block in value if block["type"] in shown], note
    return value, ""
