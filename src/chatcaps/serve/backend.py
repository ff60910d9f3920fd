"""What the app needs from whatever generates: a template, a check of the sampling fields, and generated text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from chatcaps.errors import InputError
from chatcaps.render import ChatTemplate
from chatcaps.serve.request import GenerationEnd, Sampling


class Backend(Protocol):
    """A model behind the app: llama-server (`UpstreamBackend`) or a transformers model (`LocalBackend`)."""

    model: str
    """The id `/v1/models` lists and every response names."""
    grammars: str | None
    """What applies the grammars of `chatcaps.reply.constraint` for it ("llama-server", "llguidance"), named in the
    report; None where nothing does (a request that needs one is refused by name)."""
    lazy_grammars: bool
    """Whether its grammars may wait for a trigger (llama-server's `grammar_lazy`): "auto" with tools is then
    constrained from the call opener on; else it stays free."""

    def template(self, *, tools: bool) -> ChatTemplate:
        """The template a request renders with (a tool-use template for requests with tools, where there is one)."""
        ...

    def check(self, sampling: Sampling) -> None:
        """Raise `InputError` for a sampling field this backend cannot honour."""
        ...

    def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        """The generated text in pieces as they come, then one `GenerationEnd`. Closing the iterator early (a client
        that went away) stops the generation."""
        ...

    async def count_tokens(self, text: str) -> int:
        """How many tokens `text` is to the model, special tokens read as such and nothing added (a rendered prompt
        counts as `generate` would send it)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Health:
    """Whether a backend can generate now, and what `/health` says about it."""

    ready: bool
    detail: Mapping[str, Any]


@runtime_checkable
class Watched(Protocol):
    """A backend that can be unavailable while the server runs (an upstream that is down or loading): `/health`
    asks it, and answers 503 while it is not ready."""

    async def health(self) -> Health: ...


def refuse(sampling: Sampling, supported: Sequence[str], backend: str) -> None:
    """`InputError` for the first field `sampling` sets that is not in `supported`."""
    for name in sampling.given():
        if name not in supported:
            raise InputError(f"request.{name} is not supported by {backend}", field=name)


async def close_quietly(pieces: AsyncIterator[Any]) -> None:
    """Close an iterator that is no longer read (`aclose` when it is an async generator: its `finally` runs now)."""
    aclose = getattr(pieces, "aclose", None)
    if aclose is not None:
        await aclose()
