"""What a backend is asked and what it answers (pure, no HTTP): the sampling it generates with, the grammar included,
and how a generation ended. The request itself is `chatcaps.request.ChatRequest`, read from each API's body by its
wire module; `serve/pipeline.py` turns it into these."""

from __future__ import annotations

from dataclasses import dataclass, fields

from chatcaps import request
from chatcaps.reply.constraint import Constraint
from chatcaps.wire.openai import ServerFinish


@dataclass(frozen=True)
class Sampling(request.Sampling):
    """How to generate: the request's sampling fields (`chatcaps.request.Sampling`), and the grammar to keep to."""

    grammar: Constraint | None = None
    """The constraint to apply, set once the prompt is rendered (`pipeline.constrain`)."""

    @classmethod
    def of(cls, asked: request.Sampling, grammar: Constraint | None = None) -> Sampling:
        return cls(**{field.name: getattr(asked, field.name) for field in fields(request.Sampling)}, grammar=grammar)


@dataclass(frozen=True)
class GenerationEnd:
    """How generation ended: the backend's token counts and why it stopped ("stop" or "length")."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: ServerFinish
    stop_sequence: str | None = None
    """The stop string that ended the text, where one did."""
