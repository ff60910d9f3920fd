"""`LlamaServerClient`: chat with a running llama-server, chatcaps rendering the prompt (the pre-render path).

The server's own chat endpoint renders with llama.cpp's Jinja engine and its own polyfills; this client renders with
chatcaps instead (the template from the server's `/props`, or one you give) and sends the finished prompt to
`/completion`, then splits the reply with the markers chatcaps detected (`RenderResult.parse_output`).

The prompt reaches the model exactly as rendered. `/completion` tokenizes a string prompt with special tokens parsed
and, when the model's `tokenizer.ggml.add_bos_token` is set, puts a BOS in front
(tools/server/server-common.cpp, `tokenize_mixed`). A template that writes the BOS itself would then start with two,
so, as llama.cpp's own chat path does (common/chat.cpp, `common_chat_templates_apply_jinja`), the client removes the
rendered BOS text and lets the server add the token. A prompt that does not start with the BOS on such a model is
sent as token ids (from `/tokenize`, nothing added), which the server takes as they are.

Markers are sent as `preserved_tokens`, so a reasoning marker that is a control token still appears in the reply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatcaps import sources
from chatcaps.engines import EngineName
from chatcaps.errors import InputError, ServerError
from chatcaps.intent import Intent
from chatcaps.output import ParsedOutput
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.transport import LlamaServerTransport

DEFAULT_TIMEOUT_S = 300.0
_RESERVED = frozenset({"prompt", "stream"})
"""Request fields the client owns: it sends the prompt, and reads one JSON reply."""


@dataclass(frozen=True)
class LlamaServerReply:
    """A `/completion` reply split into reasoning and content, with the render that produced its prompt."""

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

    def to_message(self) -> dict[str, Any]:
        """The reply as a canonical assistant message, ready to append to the conversation."""
        return ParsedOutput(self.content, self.reasoning_content, self.reasoning_finished).to_message()


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
        reserved = sorted(_RESERVED & set(sampling))
        if reserved:
            raise InputError(f"{', '.join(reserved)}: set by LlamaServerClient.chat, not a sampling option")
        template = self.tool_use_template if tools and self.tool_use_template is not None else self.template
        render = template.render(messages, tools=tools, reasoning=reasoning, template_args=template_args)
        markers = [marker for marker in render.reasoning_markers.values() if marker]
        prompt = self.prompt_for_server(render.prompt)
        reply = self.server.post_json("/completion", {"preserved_tokens": markers, **sampling, "prompt": prompt})
        text = _field(reply, "content", str, f"{self.url}/completion")
        parsed = render.parse_output(text)
        timings = reply.get("timings")
        return LlamaServerReply(
            content=parsed.content,
            reasoning_content=parsed.reasoning_content,
            reasoning_finished=parsed.reasoning_finished,
            render=render,
            text=text,
            prompt_tokens=_field(reply, "tokens_evaluated", int, f"{self.url}/completion"),
            completion_tokens=_field(reply, "tokens_predicted", int, f"{self.url}/completion"),
            stop_type=str(reply.get("stop_type", "")),
            truncated=bool(reply.get("truncated", False)),
            timings=dict(timings) if isinstance(timings, Mapping) else {},
        )

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


def _field(reply: Mapping[str, Any], key: str, kind: type[Any], url: str) -> Any:
    value = reply.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ServerError(f"the reply has no {kind.__name__} {key!r}: {str(reply)[:200]}", url=url)
    return value
