"""A llama-server as the backend: chatcaps' prompt to its `/completion`, streamed back over the async transport.

Startup is `LlamaServerClient`'s (the template and tool-use template from `/props`, the BOS rule, the preserved
tokens: `chatcaps.integrations.llama_server_base`), read synchronously when the CLI builds the backend: the app
needs the template and the model's name before it serves, and the ASGI server's event loop does not exist yet. Every
request then goes through `AsyncLlamaServerClient`, made from what startup read inside the server's event loop: the
BOS rule's `/tokenize` when it needs one and one streamed `POST /completion`, all awaited on the loop, so every
failure is a `ServerError`, which the app answers with 502. Closing the stream closes the HTTP connection, and
llama-server stops a generation whose client went away.

A server that is not up yet (`Waiting`: the template is given, so nothing else is needed to serve) is read on the
first request instead, inside the loop; until a read succeeds, each request is answered 503 (`UpstreamNotReady`)
and the next one tries again, so the server starts being used the moment it is up, with no restart. `health` says
which it is, asking the server's own `/health`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from chatcaps.defaults import GENERATION_TIMEOUT_S
from chatcaps.engines import EngineName
from chatcaps.errors import ServerError
from chatcaps.integrations.llama_server import AsyncLlamaServerClient, LlamaServerClient
from chatcaps.integrations.llama_server_base import ServerSetup, read_event, server_finish
from chatcaps.render import ChatTemplate
from chatcaps.serve.backend import Health, refuse
from chatcaps.serve.errors import UpstreamNotReady
from chatcaps.serve.request import GenerationEnd, Sampling
from chatcaps.transport import AsyncLlamaServerTransport, base_url
from chatcaps.wire.fields import CONSTRAINED, LLAMA_CPP_FIELDS

SUPPORTED = (
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    *LLAMA_CPP_FIELDS,
    *CONSTRAINED,
)
_FIELDS = {"max_tokens": "n_predict"}
"""OpenAI names that llama-server's `/completion` spells differently; the rest are the same."""
WAITING_MODEL = "llama-server"
"""The model's name until the server has been read (then: its model file's, as its own `/v1/models` lists it)."""


@dataclass(frozen=True)
class Waiting:
    """A llama-server that is not read yet (it may not be up): where it will be, and the template to render with."""

    url: str
    template: ChatTemplate
    engine: EngineName = "jinja2"
    timeout: float = GENERATION_TIMEOUT_S


class UpstreamBackend:
    """A llama-server prompted by chatcaps: `client`, read at startup (closed with the backend), or one `Waiting`
    to be read on first use."""

    grammars: str | None = "llama-server"
    """It applies the grammars of `chatcaps.reply.constraint` (`grammar`, `grammar_lazy`, `grammar_triggers`,
    `preserved_tokens` in its `/completion` body): the app reads this to constrain `tool_choice` and
    `response_format`."""
    lazy_grammars = True
    """Its grammars may wait for a trigger word (`grammar_lazy`): "auto" with tools is constrained from the call
    opener on."""

    def __init__(self, client: LlamaServerClient | Waiting) -> None:
        self.client = client
        self.url = base_url(client.url)
        self.model = client.model if isinstance(client, LlamaServerClient) else WAITING_MODEL
        self._setup: ServerSetup | None = client.setup if isinstance(client, LlamaServerClient) else None
        self._upstream: AsyncLlamaServerClient | None = None
        self._reading: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"UpstreamBackend({self.url!r})"

    def template(self, *, tools: bool) -> ChatTemplate:
        if isinstance(self.client, LlamaServerClient):
            return self.client.template_for(tools=tools)
        return self.client.template  # given: the server's own templates are not read (as `setup_steps` does)

    def check(self, sampling: Sampling) -> None:
        refuse(sampling, SUPPORTED, "llama-server")

    async def upstream(self) -> AsyncLlamaServerClient:
        """The async client, made on first use inside the server's event loop: from what startup read, or by reading
        a `Waiting` server now (`UpstreamNotReady` while it cannot be read; the next call tries again)."""
        if self._upstream is None:
            self._reading = self._reading or asyncio.Lock()
            async with self._reading:
                self._upstream = self._upstream or await self._read()
        return self._upstream

    async def _read(self) -> AsyncLlamaServerClient:
        if self._setup is not None:
            return AsyncLlamaServerClient(AsyncLlamaServerTransport(self.url, timeout=self.client.timeout), self._setup)
        assert isinstance(self.client, Waiting)  # only a `Waiting` server starts without a setup
        try:
            found = await AsyncLlamaServerClient.connect(
                self.url, template=self.client.template, engine=self.client.engine, timeout=self.client.timeout
            )
        except ServerError as error:
            raise UpstreamNotReady(self.url, str(error)) from error
        self._setup, self.model = found.setup, found.model
        return found

    async def health(self) -> Health:
        """Ready when the server has been read and its own `/health` answers 200 (llama-server: 503 while it loads
        its model)."""
        try:
            await (await self.upstream()).server.get_json("/health")
        except (ServerError, UpstreamNotReady) as error:
            return Health(False, {"url": self.url, "state": "unavailable", "message": str(error)})
        return Health(True, {"url": self.url, "state": "ready"})

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        url = f"{self.url}/completion"
        upstream = await self.upstream()
        grammar = upstream.grammar_fields(sampling.grammar) if sampling.grammar else {}
        async for event in upstream.stream_completion(prompt, {**_sampling(sampling), **grammar}):
            text, stop = read_event(event, url)
            if text:
                yield text
            if stop is not None:
                word = event.get("stopping_word")
                yield GenerationEnd(
                    prompt_tokens=stop.prompt_tokens,
                    completion_tokens=stop.completion_tokens,
                    finish_reason=server_finish(stop.stop_type),
                    stop_sequence=word if stop.stop_type == "word" and isinstance(word, str) and word else None,
                )
                return
        raise ServerError("the stream ended before its last event", url=url)

    async def count_tokens(self, text: str) -> int:
        """llama-server's `/tokenize` of `text` (special tokens parsed, nothing added)."""
        return len(await (await self.upstream()).tokenize(text))

    async def aclose(self) -> None:
        if self._upstream is not None:
            await self._upstream.aclose()
        if isinstance(self.client, LlamaServerClient):
            self.client.close()


def _sampling(sampling: Sampling) -> dict[str, Any]:
    named = {_FIELDS.get(name, name): getattr(sampling, name) for name in sampling.given() if name in sampling.__dict__}
    return {**named, **sampling.llama_cpp}
