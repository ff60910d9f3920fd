"""`--reasoning show|hide`: whether the model's reasoning reaches clients, on both APIs.

With "hide" no answer carries it (no `reasoning_content`, no thinking block), only its token count (OpenAI's
`usage.completion_tokens_details.reasoning_tokens`, Anthropic's `usage.output_tokens_details.thinking_tokens`), counted
by the backend's tokenizer; the `chatcaps` report's reply warnings keep their words but not the model's text they
quote (text left out of every field, which may be reasoning written after the end of turn).

In either mode a channel-style template's analysis channel (Harmony's raw chain of thought) is never answered as
content: `reasoning_format: "none"`, which keeps the reasoning in `content` as generated, is refused for such
templates, and for every template under "hide".
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal

from chatcaps.caps import Caps
from chatcaps.errors import InputError
from chatcaps.events import Event, Reasoning
from chatcaps.reply import Reply, ReplyStream
from chatcaps.serve.backend import Backend
from chatcaps.serve.request import GenerationEnd

Visibility = Literal["show", "hide"]
_QUOTED = re.compile(r": (['\"]).*\1\Z", re.DOTALL)
"""The model's text a reply warning quotes at its end (docs/reply.md: text left out of every field)."""
WITHHELD = ": (the text is withheld: --reasoning hide)"


def check_raw(raw: bool, caps: Caps, reasoning: Visibility) -> None:
    """Refuse `reasoning_format: "none"` where it would answer reasoning as content the client must not get."""
    if not raw:
        return
    if caps.reasoning.channel_style:
        why = "the template writes its reasoning in an analysis channel, which is never answered as content"
    elif reasoning == "hide":
        why = "this server hides reasoning (--reasoning hide)"
    else:
        return
    raise InputError(f"request.reasoning_format 'none' is refused: {why}", field="reasoning_format")


def shown_reply(reply: Reply, reasoning: Visibility) -> Reply:
    """The reply as clients see it: without its reasoning under "hide"."""
    return reply if reasoning == "show" else replace(reply, reasoning_content=None)


def shown_events(events: Iterable[Event], reasoning: Visibility) -> list[Event]:
    """A reply's events as clients see them: under "hide", its reasoning is left out."""
    if reasoning == "show":
        return list(events)
    return [event for event in events if not isinstance(event, Reasoning)]


async def shown_stream(
    stream: ReplyStream,
    first: str | GenerationEnd,
    pieces: AsyncIterator[str | GenerationEnd],
    reasoning: Visibility,
    *,
    initial: bool,
) -> AsyncGenerator[Event | GenerationEnd]:
    """A generation streamed through `stream` (from its `first` piece on), as clients see it: the events as the
    backend's pieces come (with `initial`, `stream.initial_events` ahead of them: what a prefilled message already
    wrote), then the backend's `GenerationEnd`. Every API's stream reads its pieces here; the caller closes `pieces`."""
    events = list(stream.initial_events) if initial else []
    piece = first
    while not isinstance(piece, GenerationEnd):
        events += stream.feed_events(piece)
        for event in shown_events(events, reasoning):
            yield event
        events = []
        piece = await anext(pieces)
    for event in shown_events(stream.close_events(), reasoning):
        yield event
    yield piece


def shown_report(report: Mapping[str, Any], reasoning: Visibility) -> dict[str, Any]:
    """The `chatcaps` report as clients see it: under "hide", the reply warnings without the text they quote."""
    if reasoning == "show":
        return dict(report)
    warnings = [_QUOTED.sub(WITHHELD, warning) for warning in report["reply"]["warnings"]]
    return {**report, "reply": {**report["reply"], "warnings": warnings}}


async def hidden_tokens(backend: Backend, reply: Reply, reasoning: Visibility) -> int | None:
    """How many tokens the hidden reasoning has (by the backend's tokenizer); None where nothing was hidden."""
    if reasoning == "show":
        return None
    return await backend.count_tokens(reply.reasoning_content) if reply.reasoning_content else 0
