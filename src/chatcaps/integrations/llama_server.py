"""`LlamaServerClient`: chat with a running llama-server, chatcaps rendering the prompt (the pre-render path).

The server's own chat endpoint renders with llama.cpp's Jinja engine and its own polyfills, and reads replies with
a parser picked per model family; this client renders with chatcaps instead (the template from the server's `/props`,
or one you give) and sends the finished prompt to `/completion`, then reads the reply with the template's own grammar
(`RenderResult.parse_reply`): reasoning, content and tool calls, in one reply (`chat`) or as OpenAI deltas
(`chat_stream`).

The prompt reaches the model exactly as rendered. `/completion` tokenizes a string prompt with special tokens parsed
and, when the model's `tokenizer.ggml.add_bos_token` is set, puts a BOS in front
(tools/server/server-common.cpp, `tokenize_mixed`). A template that writes the BOS itself would then start with two,
so, as llama.cpp's own chat path does (common/chat.cpp, `common_chat_templates_apply_jinja`), the client removes the
rendered BOS text and lets the server add the token. A prompt that does not start with the BOS on such a model is
sent as token ids (from `/tokenize`, nothing added), which the server takes as they are.

Markers are sent as `preserved_tokens`, so a reasoning marker that is a control token still appears in the reply.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatcaps import sources
from chatcaps.engines import EngineName
from chatcaps.errors import InputError, ServerError
from chatcaps.hook import PostStream, finish
from chatcaps.intent import Intent
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply import Reply
from chatcaps.transport import LlamaServerTransport

DEFAULT_TIMEOUT_S = 300.0
_RESERVED = frozenset({"prompt", "stream"})
"""Request fields the client owns: it sends the prompt, and reads one JSON reply."""


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
        return _finish_reason(self.stop_type, self.tool_calls)

    def to_message(self) -> dict[str, Any]:
        """The reply as a canonical assistant message, ready to append to the conversation."""
        return Reply(self.content, self.reasoning_content, self.tool_calls).to_message()


class LlamaServerClient:
    """A llama-server at `url`, prompted through chatcaps.

    Reads `/props` once: the template (unless `template` is given), the tool-use template when the server has one
    (used, as llama.cpp does, when a request has tools), and the BOS token; then asks `/tokenize` once whether the
    server prepends a BOS. Every request goes through one `LlamaServerTransport`, so any failure, `/props` included,
    is a `ServerError`. `close()` (or a `with` block) releases its connection.
    """

    def __init__(
        self,
        url: str,
        *,
        template: ChatTemplate | None = None,
        engine: EngineName = "jinja2",
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.server = LlamaServerTransport(url, timeout=timeout)
        self.url = self.server.url
        self.timeout = timeout
        try:
            props = self.server.get_json("/props")
            self.props: Mapping[str, Any] = props
            self.template = (
                template
                if template is not None
                else ChatTemplate(sources.from_server_props(props, url=self.url), engine=engine)
            )
            tool_use = props.get("chat_template_tool_use")
            self.tool_use_template = (
                ChatTemplate(sources.from_server_props(props, url=self.url, name="tool_use"), engine=engine)
                if template is None and isinstance(tool_use, str) and tool_use
                else None
            )
            bos = props.get("bos_token")
            self.bos_token: str = bos if isinstance(bos, str) else ""
            self.adds_bos = self._adds_bos()
        except BaseException:
            self.server.close()
            raise

    def __repr__(self) -> str:
        return f"LlamaServerClient({self.url!r}, template={self.template!r}, adds_bos={self.adds_bos})"

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
        **sampling: Any,
    ) -> LlamaServerReply:
        """Render with `ChatTemplate.render`, generate with `/completion`, and split the reply.

        `sampling` goes into the request as is (`n_predict`, `temperature`, `seed`, `stop`, ...; see llama.cpp's
        tools/server/README.md); `prompt` and `stream` are the client's.
        """
        render, body = self._request(messages, tools, reasoning, template_args, sampling)
        reply = self.server.post_json("/completion", body)
        text = _field(reply, "content", str, f"{self.url}/completion")
        parsed = render.parse_reply(text)
        timings = reply.get("timings")
        return LlamaServerReply(
            content=parsed.content,
            reasoning_content=parsed.reasoning_content,
            reasoning_finished=parsed.finish == "complete",
            render=render,
            text=text,
            prompt_tokens=_field(reply, "tokens_evaluated", int, f"{self.url}/completion"),
            completion_tokens=_field(reply, "tokens_predicted", int, f"{self.url}/completion"),
            stop_type=str(reply.get("stop_type", "")),
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
        **sampling: Any,
    ) -> LlamaServerStream:
        """`chat`, streamed: iterate the result for OpenAI `chat.completion.chunk` deltas as `/completion` streams
        (the request is sent when iteration starts); its `reply` and `finish_reason` are set once it ends."""
        render, body = self._request(messages, tools, reasoning, template_args, sampling)
        return LlamaServerStream(render, self.server.stream_json("/completion", {**body, "stream": True}))

    def _request(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        reasoning: Intent,
        template_args: Mapping[str, Any] | None,
        sampling: Mapping[str, Any],
    ) -> tuple[RenderResult, dict[str, Any]]:
        """The render and the `/completion` body for a chat request."""
        reserved = sorted(_RESERVED & set(sampling))
        if reserved:
            raise InputError(f"{', '.join(reserved)}: set by LlamaServerClient.chat, not a sampling option")
        template = self.tool_use_template if tools and self.tool_use_template is not None else self.template
        render = template.render(messages, tools=tools, reasoning=reasoning, template_args=template_args)
        markers = [marker for marker in render.reasoning_markers.values() if marker]
        prompt = self.prompt_for_server(render.prompt)
        return render, {"preserved_tokens": markers, **sampling, "prompt": prompt}

    def prompt_for_server(self, prompt: str) -> str | list[int]:
        """What to send so that the server evaluates exactly `prompt`'s tokens (see the module docstring)."""
        if not self.adds_bos:
            return prompt
        if self.bos_token and prompt.startswith(self.bos_token):
            return prompt[len(self.bos_token) :]
        return self.tokenize(prompt)

    def tokenize(self, text: str) -> list[int]:
        """The server's tokens for `text`, special tokens parsed and nothing added."""
        reply = self.server.post_json("/tokenize", {"content": text, "add_special": False, "parse_special": True})
        tokens = reply.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
            raise ServerError(f"answered without a list of token ids: {str(reply)[:200]}", url=f"{self.url}/tokenize")
        return tokens

    def _adds_bos(self) -> bool:
        """Whether a string prompt gets a BOS in front: tokenizing the BOS text with specials added gives it twice."""
        if not self.bos_token:
            return False
        reply = self.server.post_json(
            "/tokenize", {"content": self.bos_token, "add_special": True, "parse_special": True}
        )
        tokens = reply.get("tokens")
        return isinstance(tokens, list) and len(tokens) >= 2 and tokens[0] == tokens[1]


class LlamaServerStream:
    """A streamed chat reply: iterating gives the `delta` of each OpenAI `chat.completion.chunk` (the role first, a
    prefilled answer next; `chatcaps.hook.PostStream`); once it ends, `reply` (the `Reply`, warnings included),
    `text`, `stop_type`, `completion_tokens` and `finish_reason` are set. It can be iterated once."""

    def __init__(self, render: RenderResult, events: Iterator[Mapping[str, Any]]) -> None:
        self.render = render
        self._events = events
        self._stream = PostStream(render)
        self.text = ""
        self.stop_type = ""
        self.completion_tokens = 0
        self._reply: Reply | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._stream.initial
        for event in self._events:
            piece = event.get("content")
            if isinstance(piece, str) and piece:
                self.text += piece
                yield from self._stream.feed(piece)
            if event.get("stop"):
                self.stop_type = str(event.get("stop_type", ""))
                predicted = event.get("tokens_predicted")
                self.completion_tokens = predicted if isinstance(predicted, int) else 0
        yield from self._stream.close()
        self._reply = self._stream.reply

    @property
    def reply(self) -> Reply:
        if self._reply is None:
            raise RuntimeError("the reply is known once the stream has ended")
        return self._reply

    @property
    def finish_reason(self) -> str:
        """OpenAI's: "length" where the server hit its token limit, "tool_calls" where the model called tools."""
        return _finish_reason(self.stop_type, self.reply.tool_calls)


def _finish_reason(stop_type: str, tool_calls: tuple[dict[str, Any], ...]) -> str:
    return finish(Reply("", tool_calls=tool_calls), "length" if stop_type == "limit" else "stop")


def _field(reply: Mapping[str, Any], key: str, kind: type[Any], url: str) -> Any:
    value = reply.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ServerError(f"the reply has no {kind.__name__} {key!r}: {str(reply)[:200]}", url=url)
    return value
