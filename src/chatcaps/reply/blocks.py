"""A reply's events (`chatcaps.events`) as a stream of blocks, in no API's words: a block opens when the kind of text
changes (reasoning, text, a call), one block is open at a time, and blocks are numbered densely in the order they
open. Anthropic's content blocks are these (`serve/anthropic.py` writes them in its shapes); so are the output
items of OpenAI's Responses API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from chatcaps.events import CallArguments, CallStart, Event, Reasoning, Text

BlockKind = Literal["reasoning", "text", "call"]


@dataclass(frozen=True, slots=True)
class Opened:
    """Block `index` opens; a call's block with the call's start (its name, the id the model wrote)."""

    index: int
    kind: BlockKind
    call: CallStart | None = None


@dataclass(frozen=True, slots=True)
class Added:
    """More of block `index`'s text (a call's: its arguments)."""

    index: int
    kind: BlockKind
    text: str


@dataclass(frozen=True, slots=True)
class Closed:
    """Block `index` is whole: its text (a call's: its arguments, as written; "" where none came)."""

    index: int
    kind: BlockKind
    text: str
    call: CallStart | None = None


BlockEvent = Opened | Added | Closed


class Blocks:
    """Feed a reply's events (`feed`), then `close`; each gives the block events they complete."""

    def __init__(self) -> None:
        self.count = 0
        """How many blocks have closed (the open one's index)."""
        self._kind: BlockKind | None = None
        self._call: CallStart | None = None
        self._text: list[str] = []

    def feed(self, event: Event) -> list[BlockEvent]:
        if isinstance(event, CallStart):
            found = [*self._close(), Opened(self.count, "call", event)]
            self._kind, self._call = "call", event
            return [*found, *self._added(event.arguments)]
        if isinstance(event, CallArguments):
            return self._added(event.piece)
        if isinstance(event, Text | Reasoning):
            if not event.text:
                return []
            kind: BlockKind = "text" if isinstance(event, Text) else "reasoning"
            found = [] if self._kind == kind else [*self._close(), Opened(self.count, kind)]
            self._kind = kind
            return [*found, *self._added(event.text)]
        return []  # CallEnd: the call's block closes when the next one opens, or at the end

    def close(self) -> list[BlockEvent]:
        """The open block's end."""
        return self._close()

    def _added(self, text: str) -> list[BlockEvent]:
        if not text or self._kind is None:
            return []
        self._text.append(text)
        return [Added(self.count, self._kind, text)]

    def _close(self) -> list[BlockEvent]:
        if self._kind is None:
            return []
        closed = Closed(self.count, self._kind, "".join(self._text), self._call if self._kind == "call" else None)
        self.count += 1
        self._kind, self._call, self._text = None, None, []
        return [closed]
