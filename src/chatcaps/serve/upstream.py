"""A llama-server as the backend: chatcaps' prompt to its `/completion`, streamed back over the async transport.

Startup reuses `LlamaServerClient` (the template and tool-use template from `/props`, the BOS rule); each request is
one streamed `POST /completion` through `AsyncLlamaServerTransport`, so every failure is a `ServerError`, which the
app answers with 502. Closing the stream closes the HTTP connection, and llama-server stops a generation whose
client went away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import PurePath
from typing import Any

from chatcaps.errors import ServerError
from chatcaps.integrations.llama_server import LlamaServerClient
from chatcaps.render import ChatTemplate
from chatcaps.serve.backend import refuse
from chatcaps.serve.request import LLAMA_CPP_FIELDS, Finished, Sampling
from chatcaps.transport import AsyncLlamaServerTransport

SUPPORTED = (
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    *LLAMA_CPP_FIELDS,
)
_FIELDS = {"max_tokens": "n_predict"}
"""OpenAI names that llama-server's `/completion` spells differently; the rest are the same."""


class UpstreamBackend:
    """The llama-server at `client.url`, prompted by chatcaps."""

    def __init__(self, client: LlamaServerClient) -> None:
        self.client = client
        self.model = _model_name(client.props)
        self._transport: AsyncLlamaServerTransport | None = None
        templates = (client.template, client.tool_use_template)
        self._markers = sorted(
            {
                marker
                for template in templates
                if template is not None
                for marker in (
                    template.caps.reasoning.start_marker,
                    template.caps.reasoning.end_marker,
                    *template.caps.reasoning.content_headers,
                )
                if marker
            }
        )
        """Sent as `preserved_tokens`, so a marker that is a control token still appears in the text (a channel-style
        template's content headers too: the reply side reads them as grammar)."""

    def __repr__(self) -> str:
        return f"UpstreamBackend({self.client.url!r})"

    def template(self, *, tools: bool) -> ChatTemplate:
        return self.client.tool_use_template if tools and self.client.tool_use_template else self.client.template

    def check(self, sampling: Sampling) -> None:
        refuse(sampling, SUPPORTED, "llama-server")

    @property
    def transport(self) -> AsyncLlamaServerTransport:
        """Made on first use, inside the server's event loop."""
        if self._transport is None:
            self._transport = AsyncLlamaServerTransport(self.client.url, timeout=self.client.timeout)
        return self._transport

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | Finished]:
        # Only a model that adds a BOS may need a /tokenize round trip (sync, so off the event loop).
        sent = await asyncio.to_thread(self.client.prompt_for_server, prompt) if self.client.adds_bos else prompt
        body = {**_sampling(sampling), "preserved_tokens": self._markers, "stream": True, "prompt": sent}
        url = f"{self.client.url}/completion"
        async for event in self.transport.stream_json("/completion", body):
            text = event.get("content", "")
            if not isinstance(text, str):
                raise ServerError(f"an event without text content: {str(event)[:200]}", url=url)
            if text:
                yield text
            if event.get("stop") is True:
                yield Finished(
                    prompt_tokens=_count(event, "tokens_evaluated", url),
                    completion_tokens=_count(event, "tokens_predicted", url),
                    finish_reason="length" if event.get("stop_type") == "limit" else "stop",
                )
                return
        raise ServerError("the stream ended before its last event", url=url)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
        self.client.close()


def _sampling(sampling: Sampling) -> dict[str, Any]:
    named = {_FIELDS.get(name, name): getattr(sampling, name) for name in sampling.given() if name in sampling.__dict__}
    return {**named, **sampling.llama_cpp}


def _count(event: Mapping[str, Any], key: str, url: str) -> int:
    value = event.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ServerError(f"the last event has no integer {key!r}: {str(event)[:200]}", url=url)
    return value


def _model_name(props: Mapping[str, Any]) -> str:
    """The model file's name, as llama-server's own `/v1/models` lists it."""
    path = props.get("model_path")
    return PurePath(path).name if isinstance(path, str) and path else "llama-server"
