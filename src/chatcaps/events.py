"""What a reply is made of as it streams, in no API's words: the events `ReplyStream` reads out of a model's text.

`Text` and `Reasoning` carry new text of the content and of the reasoning; a call opens with `CallStart` (its name,
the id the model wrote or None, and the arguments known so far: all of them where a format sends a call whole), its
arguments grow by `CallArguments`, and `CallEnd` gives the whole `Call` once its text is read. Each API writes these
in its own shapes (`chatcaps.wire.openai.delta`, the block streams of `chatcaps.reply.blocks`); an API that wants an
id where the model wrote none makes one there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Reasoning:
    text: str


@dataclass(frozen=True, slots=True)
class Call:
    """A whole call: its name, its arguments (a JSON object as text, as the model wrote it) and the id the model
    wrote (None: it wrote none)."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class CallStart:
    """Call `index` (its place in the reply) opens: its name, the id the model wrote (None: none) and its arguments
    so far."""

    index: int
    name: str
    id: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class CallArguments:
    """A further piece of call `index`'s arguments."""

    index: int
    piece: str


@dataclass(frozen=True, slots=True)
class CallEnd:
    """Call `index` is read whole."""

    index: int
    call: Call


Event = Text | Reasoning | CallStart | CallArguments | CallEnd
