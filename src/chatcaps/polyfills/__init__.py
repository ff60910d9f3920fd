"""The polyfill pipeline: canonical input rewritten into what one template renders natively.

Each step is a pure function of (request, Caps, options) that acts only where Caps say it must and records every
change. Steps run in this order, and any can be switched off by name (`ChatTemplate.render(disable=...)`):

    normalise        aliases and spellings; None-valued keys and empty tool_calls dropped
    tools            definitions, calls and results the template cannot render, as text; one call per turn, short
                     call ids, and tools=[] where the template needs them
    reasoning        reasoning_content into the template's field, block or inline markers
    roles            developer, system, inline system and alternation
    tool_arguments   JSON string <-> object, as the template needs
    content          string <-> typed blocks; blocks it never renders dropped; None -> ""
    reasoning_intent the `reasoning=` intent: kwargs, a system flag, or a prefill (see chatcaps.intent); last, as the
                     flag goes into the turns the steps before it settled, and it also returns the plan the render
                     takes its kwargs and prefill from

`tools` and `reasoning` run before `roles`, so that user turns they create or bring together (tool results sent as
user turns, an assistant turn that held only reasoning) are merged like any others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from chatcaps.caps import Caps
from chatcaps.polyfills.arguments import tool_arguments
from chatcaps.polyfills.base import Applied, Options, Polyfill, Request
from chatcaps.polyfills.content import content
from chatcaps.polyfills.intent import NAME as INTENT
from chatcaps.polyfills.intent import IntentOutcome, add_flag, reasoning_intent, switched_off
from chatcaps.polyfills.normalise import normalise
from chatcaps.polyfills.reasoning import reasoning
from chatcaps.polyfills.roles import roles
from chatcaps.polyfills.tools import tools
from chatcaps.vocab import REASONING_CONTENT, REASONING_KEYS

STEPS: Mapping[str, Polyfill] = MappingProxyType(
    {
        "normalise": normalise,
        "tools": tools,
        "reasoning": reasoning,
        "roles": roles,
        "tool_arguments": tool_arguments,
        "content": content,
    }
)
"""The steps before the intent, in order."""
POLYFILLS: tuple[str, ...] = (*STEPS, INTENT)
"""Every polyfill name, in pipeline order: `disable=POLYFILLS` renders exactly what the template renders raw."""

__all__ = [
    "INTENT",
    "POLYFILLS",
    "STEPS",
    "Applied",
    "Options",
    "Request",
    "add_flag",
    "is_content_only",
    "is_text_chat",
    "live_steps",
    "run_pipeline",
]


def live_steps(
    caps: Caps,
    disabled: frozenset[str] = frozenset(),
    *,
    text_chat: bool = False,
    canonical: bool = False,
    content_only: bool = False,
) -> tuple[Polyfill, ...]:
    """The enabled steps, in order, but those that can change nothing for a template with these Caps, whatever the
    input (a template that reads reasoning_content itself needs no `reasoning` step, one with every role no `roles`),
    or, with `content_only`, whatever content-only chat it gets (see `is_content_only`), or, with `text_chat`,
    whatever text chat (`is_text_chat`); with `canonical` (input `normalise` would leave as it is,
    `validate_messages` says), no `normalise`. Skipping them changes no output; it spares most requests most of the
    pipeline's cost."""
    idle = {name for name, inert in _INERT.items() if inert(caps)}
    if content_only or text_chat:
        idle.update(name for name, inert in _INERT_ON_CONTENT.items() if inert(caps))
    if text_chat:
        idle.update(name for name, inert in _INERT_ON_TEXT.items() if inert(caps))
    if canonical:
        idle.add("normalise")
    return tuple(step for name, step in STEPS.items() if name not in disabled and name not in idle)


def is_text_chat(request: Request) -> bool:
    """No tools, and every turn a role and a string content, nothing else: what most requests are."""
    return request.tools is None and all(
        len(message) == 2 and type(message.get("content")) is str for message in request.messages
    )


def is_content_only(request: Request) -> bool:
    """No tools, no tool calls or results and no reasoning: turns of a role and content (of any shape), maybe more
    keys, which only `normalise`, `roles` and `content` act on (an image with its question, a typed chat)."""
    return request.tools is None and not any(
        message.get("tool_calls") or message.get("role") == "tool" or not REASONING_KEYS.isdisjoint(message)
        for message in request.messages
    )


def run_pipeline(
    request: Request, caps: Caps, options: Options, steps: tuple[Polyfill, ...], intent: bool = True
) -> IntentOutcome:
    """`steps` in order (`live_steps`), then the intent unless it is disabled: the request rewritten, every change,
    and the intent's plan."""
    applied: list[Applied] = []
    for step in steps:
        request, done = step(request, caps, options)
        if done:
            applied += done
    if not intent:
        return request, tuple(applied), switched_off(options)
    request, done, plan = reasoning_intent(request, caps, options)
    return request, (*applied, *done) if done else tuple(applied), plan


_INERT: Mapping[str, Callable[[Caps], bool]] = MappingProxyType(
    {
        "tools": lambda caps: (
            caps.tools.definitions
            and caps.tools.calls
            and caps.tools.responses
            and caps.tools.parallel_calls
            and not caps.tools.short_call_ids
            and not caps.tools.requires_list
        ),
        "reasoning": lambda caps: (
            caps.reasoning.format == REASONING_CONTENT
            and not caps.reasoning.requires_tools
            and not any(effect.format for control in caps.reasoning.controls for effect in control.effect.values())
        ),
        "roles": lambda caps: (
            caps.roles.developer
            and caps.roles.system
            and caps.roles.system_inline
            and not caps.roles.requires_alternation
        ),
        "tool_arguments": lambda caps: caps.tools.arguments not in ("object", "string"),
    }
)
"""Per step, the Caps under which it never changes anything (each step checks the same itself, and returns its
request untouched)."""
_INERT_ON_CONTENT: Mapping[str, Callable[[Caps], bool]] = MappingProxyType(
    {
        "tools": lambda caps: not caps.tools.requires_list,  # nothing but `tools=[]` for tools=None to write
        "reasoning": lambda caps: True,
        "tool_arguments": lambda caps: True,
    }
)
"""The same for a content-only chat (`is_content_only`): nothing in it for the tool and reasoning steps to rewrite."""
_INERT_ON_TEXT: Mapping[str, Callable[[Caps], bool]] = MappingProxyType(
    {
        "normalise": lambda caps: True,  # no aliases, None values, tool calls or blocks to respell
        "content": lambda caps: not caps.content.requires_typed,  # strings stay strings
    }
)
"""And for a text chat (`is_text_chat`), a content-only chat of strings: only what such a chat can make a step do
is left."""
