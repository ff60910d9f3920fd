"""The polyfill pipeline of SPEC section 4: canonical input rewritten into what one template renders natively.

Each step is a pure function of (request, Caps, options) that acts only where Caps say it must and records every
change. Steps run in this order, and any can be switched off by name (`ChatTemplate.render(disable=...)`):

    normalise        aliases and spellings; None-valued keys and empty tool_calls dropped
    tools            definitions, calls and results the template cannot render, as text; one call per turn, short
                     call ids, and tools=[] where the template needs them
    reasoning        reasoning_content into the template's field, block or inline markers
    roles            developer, system, inline system and alternation
    tool_arguments   JSON string <-> object, as the template needs
    content          string <-> typed blocks; blocks it never renders dropped; None -> ""
    reasoning_intent the `reasoning=` intent: kwargs, a system flag, or a prefill (see chatcaps.intent)

`tools` and `reasoning` run before `roles`, so that user turns they create or bring together (tool results sent as
user turns, an assistant turn that held only reasoning) are merged like any others.
"""

from __future__ import annotations

from collections.abc import Mapping

from chatcaps.caps import Caps
from chatcaps.polyfills.arguments import tool_arguments
from chatcaps.polyfills.base import Applied, Message, Options, Outcome, Polyfill, Request
from chatcaps.polyfills.content import content
from chatcaps.polyfills.normalise import normalise
from chatcaps.polyfills.reasoning import reasoning
from chatcaps.polyfills.roles import roles
from chatcaps.polyfills.tools import tools

STEPS: Mapping[str, Polyfill] = {
    "normalise": normalise,
    "tools": tools,
    "reasoning": reasoning,
    "roles": roles,
    "tool_arguments": tool_arguments,
    "content": content,
}
INTENT = "reasoning_intent"
POLYFILLS: tuple[str, ...] = (*STEPS, INTENT)
"""Every polyfill name, in pipeline order: `disable=POLYFILLS` renders exactly what the template renders raw."""

__all__ = ["INTENT", "POLYFILLS", "STEPS", "Applied", "Options", "Request", "add_flag", "run_steps"]


def run_steps(request: Request, caps: Caps, options: Options, disabled: frozenset[str]) -> Outcome:
    """Every enabled step but the intent, in order."""
    applied: list[Applied] = []
    for name, step in STEPS.items():
        if name not in disabled:
            request, done = step(request, caps, options)
            applied.extend(done)
    return request, tuple(applied)


def add_flag(request: Request, caps: Caps, flag: str) -> Outcome:
    """`flag` (e.g. "/no_think") appended to the system turn, a new system turn where the template has that role, or
    else the last user turn: where the probes found it to act."""
    messages: list[Message] = list(request.messages)
    if messages and messages[0]["role"] == "system" and isinstance(messages[0].get("content"), str | None):
        messages[0] = {**messages[0], "content": f"{messages[0].get('content') or ''} {flag}".lstrip()}
        where = "messages[0] (system)"
    elif caps.roles.system:
        messages.insert(0, {"role": "system", "content": flag})
        where = "a new system turn"
    else:
        users = [index for index, message in enumerate(messages) if message["role"] == "user"]
        if not users:
            return request, ()
        index = users[-1]
        value = messages[index].get("content")
        text = f"{value} {flag}" if isinstance(value, str) else [*(value or []), {"type": "text", "text": flag}]
        messages[index] = {**messages[index], "content": text}
        where = f"messages[{index}] (the last user turn)"
    return Request(tuple(messages), request.tools), (Applied(INTENT, f"{flag} added to {where}"),)
