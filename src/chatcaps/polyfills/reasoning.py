"""`reasoning`: each assistant turn's `reasoning_content` written where the template reads reasoning.

A field (`thinking`, `reasoning`, `thought`, `tool_plan`), a content block (`{"type": "thinking"}`), or inline text
between the detected markers (a continued final message with no content yet gets the start marker and its reasoning
only, so the model goes on inside the block, `Options.continued`); dropped, with a record, when the template shows
reasoning in no form, or only next to tool calls and the turn has none. Which past turns keep it is the template's
own choice (`Caps.reasoning.history`).
"""

from __future__ import annotations

from typing import Any

import orjson

from chatcaps.caps import Caps
from chatcaps.intent import plan_intent
from chatcaps.polyfills.base import Applied, Message, Options, Outcome, Request
from chatcaps.vocab import BLOCK_FORMS, FIELD_FORMS, REASONING_CONTENT, ReasoningFormat

NAME = "reasoning"
FIELDS = frozenset(FIELD_FORMS) - {REASONING_CONTENT}


def reasoning(request: Request, caps: Caps, options: Options) -> Outcome:
    form, requires_tools = form_in_use(caps, options)
    if form == REASONING_CONTENT and not requires_tools:
        return request, ()  # the template reads the canonical field itself, in every turn it keeps
    applied: list[Applied] = []
    messages: list[Message | None] = list(request.messages)
    for index, message in enumerate(request.messages):
        text = message.get(REASONING_CONTENT)
        if text is None or message["role"] != "assistant":
            continue
        rest = dict(message)
        del rest[REASONING_CONTENT]
        why = None
        if form == "none":
            why = "the template shows none"
        elif requires_tools and not message.get("tool_calls"):
            why = "the template shows it only next to tool calls"
        if why is not None:
            empty = not rest.get("content") and not rest.get("tool_calls")
            messages[index] = None if empty else rest
            what = "reasoning-only turn dropped" if empty else "reasoning dropped"
            applied.append(Applied(NAME, f"messages[{index}]: {what} ({why})"))
        elif form in FIELDS:
            messages[index] = {**rest, form: text}
            applied.append(Applied(NAME, f"messages[{index}]: reasoning_content -> {form}"))
        elif form in BLOCK_FORMS:
            messages[index] = {**rest, "content": _with_block(message.get("content"), form, text)}
            applied.append(Applied(NAME, f"messages[{index}]: reasoning_content -> a {BLOCK_FORMS[form][0]} block"))
        elif form == "inline":
            resumed = options.continued and index == len(request.messages) - 1 and not message.get("content")
            resumed = resumed and not message.get("tool_calls")
            messages[index] = {**rest, "content": _inline(message.get("content"), caps, text, closed=not resumed)}
            where = "left open (the message is continued)" if resumed else "between markers"
            applied.append(Applied(NAME, f"messages[{index}]: reasoning_content written inline {where}"))
    if not applied:
        return request, ()
    kept = [message for message in messages if message is not None]  # a list comprehension: quicker than a generator
    return Request(tuple(kept), request.tools), tuple(applied)


def form_in_use(caps: Caps, options: Options) -> tuple[ReasoningFormat, bool]:
    """The form the render reads past reasoning from, and whether only next to tool calls: a control value that
    makes the template read another field (thinking switched on, by the intent or by `template_args`) wins over the
    default form (`Effect.format`)."""
    controls = caps.reasoning.controls
    if any(effect.format for control in controls for effect in control.effect.values()):
        kwargs = {**plan_intent(options.reasoning, caps, options.template_args).kwargs, **options.template_args}
        for control in controls:
            if control.name in kwargs:
                effect = control.effect.get(orjson.dumps(kwargs[control.name]).decode())
                if effect is not None and effect.format is not None:
                    return effect.format, False
    return caps.reasoning.format, caps.reasoning.requires_tools


def inline_text(caps: Caps, reasoning_text: str, *, closed: bool = True) -> str:
    """Reasoning between the template's markers, on lines of its own, with a blank line before the answer; without
    `closed`, the start marker and the reasoning text alone (a block the model goes on in)."""
    opened = f"{caps.reasoning.start_marker or ''}\n{reasoning_text}"
    return f"{opened}\n{caps.reasoning.end_marker or ''}\n\n" if closed else opened


def _with_block(content: Any, form: ReasoningFormat, text: str) -> list[dict[str, Any]]:
    block_type, key = BLOCK_FORMS[form]
    block = {"type": block_type, key: text}
    if content is None or content == "":
        return [block]
    if isinstance(content, str):
        return [block, {"type": "text", "text": content}]
    return [block, *content]


def _inline(content: Any, caps: Caps, text: str, *, closed: bool) -> Any:
    prefix = inline_text(caps, text, closed=closed)
    if content is None or isinstance(content, str):
        return prefix + (content or "")
    return [{"type": "text", "text": prefix}, *content]
