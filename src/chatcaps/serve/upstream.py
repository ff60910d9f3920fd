"""A llama-server as the backend: chatcaps' prompt to its `/completion`, streamed back over the async transport.

Startup is `LlamaServerClient`'s (the template and tool-use template from `/props`, the BOS rule, the preserved
tokens: `chatcaps.integrations.llama_server_base`), read synchronously when the CLI builds the backend: the app
needs the template and the model's name before it serves, and the ASGI server's event loop does not exist yet. Every
request then goes through `AsyncLlamaServerClient`, made from what startup read inside the server's event loop: the
BOS rule's `/tokenize` when it needs one and one streamed `POST /completion`, all awaited on the loop, so every
failure is a `ServerError`, which the app answers with 502. Closing the stream closes the HTTP connection, and
llama-server stops a generation whose client went away.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from chatcaps.errors import ServerError
from chatcaps.integrations.llama_server import AsyncLlamaServerClient, LlamaServerClient
from chatcaps.integrations.llama_server_base import read_event, server_finish
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
    """The llama-server `client` read at startup, prompted by chatcaps; the backend closes `client` with itself."""

    def __init__(self, client: LlamaServerClient) -> None:
        self.client = client
        self.model = client.model
        self._upstream: AsyncLlamaServerClient | None = None

    def __repr__(self) -> str:
        return f"UpstreamBackend({self.client.url!r})"

    def template(self, *, tools: bool) -> ChatTemplate:
        return self.client.template_for(tools=tools)

    def check(self, sampling: Sampling) -> None:
        refuse(sampling, SUPPORTED, "llama-server")

    @property
    def upstream(self) -> AsyncLlamaServerClient:
        """Made on first use, inside the server's event loop, from what `client` read at startup."""
        if self._upstream is None:
            transport = AsyncLlamaServerTransport(self.client.url, timeout=self.client.timeout)
            self._upstream = AsyncLlamaServerClient(transport, self.client.setup)
        return self._upstream

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | Finished]:
        url = f"{self.client.url}/completion"
        async for event in self.upstream.stream_completion(prompt, _sampling(sampling)):
            text, stop = read_event(event, url)
            if text:
                yield text
            if stop is not None:
                word = event.get("stopping_word")
                yield Finished(
                    prompt_tokens=stop.prompt_tokens,
                    completion_tokens=stop.completion_tokens,
                    finish_reason=server_finish(stop.stop_type),
                    stop_sequence=word if stop.stop_type == "word" and isinstance(word, str) and word else None,
                )
                return
        raise ServerError("the stream ended before its last event", url=url)

    async def count_tokens(self, text: str) -> int:
        """llama-server's `/tokenize` of `text` (special tokens parsed, nothing added)."""
        return len(await self.upstream.tokenize(text))

    async def aclose(self) -> None:
        if self._upstream is not None:
            await self._upstream.aclose()
        self.client.close()


def _sampling(sampling: Sampling) -> dict[str, Any]:
    named = {_FIELDS.get(name, name): getattr(sampling, name) for name in sampling.given() if name in sampling.__dict__}
    return {**named, **sampling.llama_cpp}
