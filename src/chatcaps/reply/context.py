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
    inside a continued final message, its last `len(continued)` characters are the start of that message, read
    with the reply."""
    tools: Sequence[Mapping[str, Any]] | None = None
    """The request's tools: call arguments are typed from their schemas, and a call to another name is warned."""
    end_of_turn: str | None = None
    """What the template writes after an assistant message: None takes `caps.end_of_turn`, "" means none."""
    continue_from: Callable[[], str] | None = field(default=None, repr=False, compare=False)
    """How to find `continued`, called once a reply is read: a context that is never read does not pay for it."""

    @cached_property
    def continued(self) -> str:
        """What the prompt already holds of a continued final message (an unfinished reasoning block, the start of
        an answer); "" where there is none. The reply is read as this text followed by what the model generates."""
        return self.continue_from() if self.continue_from is not None else ""

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
        """`parse` as the reply streams: a `ReplyStream` whose `initial` deltas carry what the prompt already wrote
        of the message."""
        stream = self._reader(raw, calls_in_reasoning)
        if not raw and self.continued:  # what the prompt already wrote of the message: the deltas it starts with
            stream.initial += stream.feed(self.continued)
        return stream

    def _reader(self, raw: bool, calls_in_reasoning: CallsInReasoning) -> ReplyStream:
        """The parser run both read with (`parse_reply` is one such run, fed the whole text)."""
        return ReplyStream(
            self.caps,
            prefix="" if raw else self._before_continued,
            tools=self.tools,
            end_of_turn=self.end_of_turn,
            calls_in_reasoning=calls_in_reasoning,
            raw=raw,
        )

    @property
    def _before_continued(self) -> str:
        """The prompt less `continued`, which is read with the reply."""
        return self.prefix[: len(self.prefix) - len(self.continued)]
