"""`ReplyContext`: what reading the reply to one prompt needs, so that a render hands it over and the reply side reads
it without knowing renders (the import goes from `render` to `reply`, never back)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from chatcaps.caps import Caps
from chatcaps.reply.parse import CallsInReasoning, Reply, ReplyStream


@dataclass(frozen=True)
class ReplyContext:
    """The template's Caps, the prompt the reply continues, the request's tools and the end of turn: `parse` and
    `stream` read a model's reply to that prompt (`parse_reply` and `ReplyStream` with these arguments)."""

    caps: Caps
    prefix: str = ""
    """The prompt the reply continues ("" where the generated text is the whole message). Where the prompt ends
    inside a continued final message, `continue_from` says where that message starts, read with the reply."""
    tools: Sequence[Mapping[str, Any]] | None = None
    """The request's tools: call arguments are typed from their schemas, and a call to another name is warned."""
    end_of_turn: str | None = None
    """What the template writes after an assistant message: None takes `caps.end_of_turn`, "" means none."""
    continue_from: Callable[[], tuple[str, str]] | None = field(default=None, repr=False, compare=False)
    """How to find a continued final message, called once a reply is read (a context that is never read does not
    pay for it): the prompt to read the message after, and `continued`. The prompt less `continued`, usually; where
    the template writes the message without the generation prompt's own opening text, the prompt the conversation
    before the message gets with its generation prompt."""

    @cached_property
    def _continuation(self) -> tuple[str, str]:
        return self.continue_from() if self.continue_from is not None else (self.prefix, "")

    @property
    def continued(self) -> str:
        """What the prompt already holds of a continued final message (an unfinished reasoning block, the start of
        an answer); "" where there is none. The reply is read as this text followed by what the model generates."""
        return self._continuation[1]

    def parse(self, text: str, *, raw: bool = False, calls_in_reasoning: CallsInReasoning = "call") -> Reply:
        """Read `text`, what the model generated after the prompt: `parse_reply` with this context, so what the
        prompt wrote of the message (an opened reasoning block, a prefill, a continued message) is part of the reply.
        `raw=True` keeps the reasoning in `content` as generated, still reading tool calls; the text is then read on
        its own."""
        stream = self._reader(raw, calls_in_reasoning)
        stream.feed(text if raw else self.continued + text)
        stream.close()
        return stream.reply

    def stream(self, *, raw: bool = False, calls_in_reasoning: CallsInReasoning = "call") -> ReplyStream:
        """`parse` as the reply streams: a `ReplyStream` whose `initial_events` carry what the prompt already wrote
        of the message."""
        stream = self._reader(raw, calls_in_reasoning)
        if not raw and self.continued:  # what the prompt already wrote of the message: the deltas it starts with
            stream.initial_events += stream.feed_events(self.continued)
        return stream

    def _reader(self, raw: bool, calls_in_reasoning: CallsInReasoning) -> ReplyStream:
        """The parser run both read with (`parse_reply` is one such run, fed the whole text)."""
        return ReplyStream(
            self.caps,
            prefix="" if raw else self._continuation[0],
            tools=self.tools,
            end_of_turn=self.end_of_turn,
            calls_in_reasoning=calls_in_reasoning,
            raw=raw,
        )
