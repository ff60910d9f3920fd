"""`LlamaServerClient`: chat with a running llama-server, chatcaps rendering the prompt (the pre-render path); and
`AsyncLlamaServerClient`, its async twin for an event loop (what `chatcaps serve --upstream` sends requests with).

The server's own chat endpoint renders with llama.cpp's Jinja engine and its own polyfills, and reads replies with
a parser picked per model family; this client renders with chatcaps instead (the template from the server's `/props`,
or one you give) and sends the finished prompt to `/completion`, then reads the reply with the template's own grammar
(`RenderResult.parse_reply`): reasoning, content and tool calls, in one reply (`chat`) or as OpenAI deltas
(`chat_stream`).

The prompt reaches the model exactly as rendered (the BOS rule), and the control tokens of the reply's grammar are
sent as `preserved_tokens`, so that the server writes them into the reply: both are `LlamaServerBase`'s
(`chatcaps.integrations.llama_server_base`), which holds all the logic the two clients share; each of them only
carries the requests over its transport (`chatcaps.transport`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from chatcaps.defaults import GENERATION_TIMEOUT_S
from chatcaps.engines import EngineName
from chatcaps.errors import ServerError
from chatcaps.hook import PostStream
from chatcaps.integrations.llama_server_base import (
    Choice,
    LlamaServerBase,
    ServerSetup,
    Steps,
    read_event,
    read_stop,
    reply_finish_reason,
    setup_steps,
    tokenize_steps,
)
from chatcaps.intent import Intent
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply import Reply
from chatcaps.transport import AsyncLlamaServerTransport, LlamaServerTransport, excerpt

_T = TypeVar("_T")


@dataclass(frozen=True)
class LlamaServerReply:
    """A `/completion` reply read into reasoning, content and tool calls, with the render that produced its prompt."""

    content: str
    reasoning_content: str | None
    reasoning_finished: bool
    """False when the reply ended inside the reasoning block (e.g. `n_predict` ran out)."""
    render: RenderResult
    text: str
    """The generated text as the server returned it, before splitting."""
    prompt_tokens: int
    """`tokens_evaluated`: how many prompt tokens the server read."""
    completion_tokens: int
    """`tokens_predicted`."""
    stop_type: str
    """"eos", "limit" or "word" (the server's `stop_type`)."""
    truncated: bool
    timings: Mapping[str, float] = field(default_factory=dict)
    """The server's `timings` (prompt_ms, predicted_per_second, ...)."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """OpenAI-shaped calls (`Reply.tool_calls`)."""
    warnings: tuple[str, ...] = ()
    """What was odd about the reply (`Reply.warnings`)."""

    @property
    def finish_reason(self) -> str:
        """OpenAI's: "length" where the server hit its token limit, "tool_calls" where the model called tools."""
        return reply_finish_reason(self.stop_type, self.tool_calls)

    def to_message(self) -> dict[str, Any]:
        """The reply as a canonical assistant message, ready to append to the conversation."""
        return Reply(self.content, self.reasoning_content, self.tool_calls).to_message()


class LlamaServerClient(LlamaServerBase):
    """A llama-server at `url`, prompted through chatcaps.

    Startup (`llama_server_base.setup_steps`) reads `/props`: the template (unless `template` is given), the tool-use
    template when the server has one (used, as llama.cpp does, when a request has tools), and the BOS token; then asks
    `/tokenize` whether the server prepends a BOS and which of the reply grammar's tokens are control tokens. Every
    request goes through one `LlamaServerTransport`, so any failure, `/props` included, is a `ServerError`. `close()`
    (or a `with` block) releases its connection.
    """

    def __init__(
        self,
        url: str,
        *,
        template: ChatTemplate | None = None,
        engine: EngineName = "jinja2",
        timeout: float = GENERATION_TIMEOUT_S,
    ) -> None:
        self.server = LlamaServerTransport(url, timeout=timeout)
        try:
            found = self._run(setup_steps(self.server.url, template, engine))
        except BaseException:
            self.server.close()
            raise
        super().__init__(self.server.url, timeout, found)

    def __enter__(self) -> LlamaServerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.close()

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        reasoning: Intent = None,
        template_args: Mapping[str, Any] | None = None,
        choice: Choice | None = None,
        **sampling: Any,
    ) -> LlamaServerReply:
        """Render with `ChatTemplate.render`, generate with `/completion`, and split the reply.

        `sampling` goes into the request as is (`n_predict`, `temperature`, `seed`, `stop`, ...; see llama.cpp's
        tools/server/README.md); `prompt` and `stream` are the client's. `choice` (`tool_choice`,
        `parallel_tool_calls`, `response_format`) is kept to by a grammar from the template's call format
        (docs/constrained.md).
        """
        steps = self.chat_steps(messages, tools, reasoning, template_args, sampling, stream=False, choice=choice)
        render, body = self._run(steps)
        url = f"{self.url}/completion"
        reply = self.server.post_json("/completion", body)
        text = reply.get("content")
        if not isinstance(text, str):
            raise ServerError(f"the reply has no str 'content': {excerpt(reply)}", url=url)
        stop = read_stop(reply, url)
        parsed = render.parse_reply(text)
        timings = reply.get("timings")
        return LlamaServerReply(
            content=parsed.content,
            reasoning_content=parsed.reasoning_content,
            reasoning_finished=parsed.finish == "complete",
            render=render,
            text=text,
            prompt_tokens=stop.prompt_tokens,
            completion_tokens=stop.completion_tokens,
            stop_type=stop.stop_type,
            truncated=bool(reply.get("truncated", False)),
            timings=dict(timings) if isinstance(timings, Mapping) else {},
            tool_calls=parsed.tool_calls,
            warnings=parsed.warnings,
        )

    def chat_stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        reasoning: Intent = None,
        template_args: Mapping[str, Any] | None = None,
        choice: Choice | None = None,
        **sampling: Any,
    ) -> LlamaServerStream:
        """`chat`, streamed: iterate the result for OpenAI `chat.completion.chunk` deltas as `/completion` streams
        (the request is sent when iteration starts); its `reply` and `finish_reason` are set once it ends."""
        steps = self.chat_steps(messages, tools, reasoning, template_args, sampling, stream=True, choice=choice)
        render, body = self._run(steps)
        return LlamaServerStream(render, self.server.stream_json("/completion", body), f"{self.url}/completion")

    def prompt_for_server(self, prompt: str) -> str | list[int]:
        """What to send so that the server evaluates exactly `prompt`'s tokens (the BOS rule: `LlamaServerBase`)."""
        return self._run(self.prompt_steps(prompt))

    def tokenize(self, text: str) -> list[int]:
        """The server's tokens for `text`, special tokens parsed and nothing added."""
        return self._run(tokenize_steps(text, self.url))

    def _run(self, steps: Steps[_T]) -> _T:
        """`steps` with each request sent over the transport."""
        try:
            path, body = next(steps)
            while True:
                answer = self.server.get_json(path) if body is None else self.server.post_json(path, body)
                path, body = steps.send(answer)
        except StopIteration as done:
            result: _T = done.value
            return result


class AsyncLlamaServerClient(LlamaServerBase):
    """`LlamaServerClient`'s twin over `AsyncLlamaServerTransport`: the same startup and requests, awaited.

    `await AsyncLlamaServerClient.connect(url, ...)` reads the server as `LlamaServerClient(url, ...)` does; a
    `ServerSetup` read already (`LlamaServerClient.setup`) makes one without asking the server again. Make it inside
    the event loop that uses it, and `aclose()` it there.
    """

    def __init__(self, server: AsyncLlamaServerTransport, server_setup: ServerSetup) -> None:
        super().__init__(server.url, server.timeout, server_setup)
        self.server = server

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        template: ChatTemplate | None = None,
        engine: EngineName = "jinja2",
        timeout: float = GENERATION_TIMEOUT_S,
    ) -> AsyncLlamaServerClient:
        server = AsyncLlamaServerTransport(url, timeout=timeout)
        try:
            found = await _run_async(server, setup_steps(server.url, template, engine))
        except BaseException:
            await server.aclose()
            raise
        return cls(server, found)

    async def aclose(self) -> None:
        await self.server.aclose()

    async def stream_completion(self, prompt: str, sampling: Mapping[str, Any]) -> AsyncIterator[Mapping[str, Any]]:
        """`/completion` for a rendered prompt, streamed: each server-sent event's JSON object (`read_event` reads
        one). Nothing is sent until iteration starts."""
        body = await _run_async(self.server, self.completion_steps(prompt, sampling, stream=True))
        async for event in self.server.stream_json("/completion", body):
            yield event

    async def prompt_for_server(self, prompt: str) -> str | list[int]:
        """`LlamaServerClient.prompt_for_server`, awaited."""
        return await _run_async(self.server, self.prompt_steps(prompt))

    async def tokenize(self, text: str) -> list[int]:
        """`LlamaServerClient.tokenize`, awaited."""
        return await _run_async(self.server, tokenize_steps(text, self.url))


async def _run_async(server: AsyncLlamaServerTransport, steps: Steps[_T]) -> _T:
    """`steps` with each request sent over the async transport."""
    try:
        path, body = next(steps)
        while True:
            answer = await (server.get_json(path) if body is None else server.post_json(path, body))
            path, body = steps.send(answer)
    except StopIteration as done:
        result: _T = done.value
        return result


class LlamaServerStream:
    """A streamed chat reply: iterating gives the `delta` of each OpenAI `chat.completion.chunk` (the role first, a
    prefilled answer next; `hook.PostStream`); once it ends, `reply` (the `Reply`, warnings included),
    `text`, `stop_type`, `completion_tokens` and `finish_reason` are set. It can be iterated once."""

    def __init__(self, render: RenderResult, events: Iterator[Mapping[str, Any]], url: str) -> None:
        self.render = render
        self.url = url
        self._events = events
        self.text = ""
        self.stop_type = ""
        self.completion_tokens = 0
        self._reply: Reply | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        stream = PostStream(self.render)
        yield from stream.initial
        ended = False
        for event in self._events:
            piece, stop = read_event(event, self.url)
            if piece:
                self.text += piece
                yield from stream.feed(piece)
            if stop is not None:
                self.stop_type, self.completion_tokens, ended = stop.stop_type, stop.completion_tokens, True
        if not ended:
            raise ServerError("the stream ended before its last event", url=self.url)
        yield from stream.close()
        self._reply = stream.reply

    @property
    def reply(self) -> Reply:
        if self._reply is None:
            raise RuntimeError("the reply is known once the stream has ended")
        return self._reply

    @property
    def finish_reason(self) -> str:
        """OpenAI's: "length" where the server hit its token limit, "tool_calls" where the model called tools."""
        return reply_finish_reason(self.stop_type, self.reply.tool_calls)
