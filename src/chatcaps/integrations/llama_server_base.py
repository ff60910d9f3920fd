"""What the sync `LlamaServerClient` and the async one share: the llama-server logic, with no I/O in it.

As httpx splits `BaseClient` from `Client` and `AsyncClient`, `LlamaServerBase` holds everything that decides what to
send and how to read the answer; the two clients only carry requests over their transport. Logic that needs the
server's answers midway (reading `/props` at startup, the BOS rule's `/tokenize`) is written once as `Steps`: a
generator that yields each request and is sent the JSON object the server answered; each client runs the same steps
over its own transport.

What startup reads (`ServerSetup`, `setup_steps`): the template from `/props` (unless one is given) and its tool-use
template, used, as llama.cpp does, for a request with tools; the BOS text and whether the server puts a BOS in front
of a string prompt; and the `preserved_tokens` every request sends.

The BOS rule: `/completion` tokenizes a string prompt with special tokens parsed and, when the model's
`tokenizer.ggml.add_bos_token` is set, puts a BOS in front (tools/server/server-common.cpp, `tokenize_mixed`). A
template that writes the BOS itself would then start with two, so, as llama.cpp's own chat path does
(common/chat.cpp, `common_chat_templates_apply_jinja`), the rendered BOS text is removed and the server adds the token.
A prompt that does not start with the BOS on such a model is sent as token ids (from `/tokenize`, nothing added),
which the server takes as they are.

`preserved_tokens`: llama-server writes a control token's text into the reply only when the request preserves it
(tools/server/server-context.cpp, `accept_special_token`), and it keeps only the entries that tokenize to one token
(server-schema.cpp), so a marker such as `<|channel|>analysis<|message|>` sent whole preserves nothing. What is sent
is every control token in the text the reply side reads as grammar, the reasoning markers and content headers of the
template and its tool-use template: the tokens `/tokenize` gives for that text with special tokens parsed and not
without (user-defined tokens, such as a `<think>` that is not a control token, come out either way, and the server
writes them anyway). One list for every request, whichever template renders it.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, TypeVar

from chatcaps import sources
from chatcaps.engines import EngineName
from chatcaps.errors import InputError, ServerError
from chatcaps.intent import Intent
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply.constraint import Constraint, constraint
from chatcaps.transport import excerpt
from chatcaps.wire.openai import ServerFinish, finish_reason

_T = TypeVar("_T")
Call = tuple[str, Mapping[str, Any] | None]
"""One request: the path, and the JSON body to POST there (None: a GET)."""
Steps = Generator[Call, Mapping[str, Any], _T]
"""Logic that needs the server midway: it yields each `Call`, is sent the JSON object answered, and returns its
result (see the module docstring)."""

RESERVED = frozenset({"prompt", "stream"})
"""Request fields the client owns: it sends the prompt, and chooses whether the reply streams."""


@dataclass(frozen=True)
class ServerSetup:
    """What startup reads from the server, once (see the module docstring)."""

    props: Mapping[str, Any]
    template: ChatTemplate
    tool_use_template: ChatTemplate | None
    bos_token: str
    adds_bos: bool
    preserved_tokens: tuple[str, ...]


def setup_steps(url: str, template: ChatTemplate | None, engine: EngineName) -> Steps[ServerSetup]:
    """Startup: `/props`, then `/tokenize` for the BOS rule and for the preserved tokens. `template` replaces the
    server's (and then no tool-use template is taken from it)."""
    props = yield ("/props", None)
    chosen = (
        template if template is not None else ChatTemplate(sources.from_server_props(props, url=url), engine=engine)
    )
    tool_use = props.get("chat_template_tool_use")
    tool_use_template = (
        ChatTemplate(sources.from_server_props(props, url=url, name="tool_use"), engine=engine)
        if template is None and isinstance(tool_use, str) and tool_use
        else None
    )
    bos = props.get("bos_token")
    bos_token = bos if isinstance(bos, str) else ""
    adds_bos = False
    if bos_token:
        adds_bos = yield from _adds_bos(bos_token, url)
    grammar = grammar_text(chosen, tool_use_template)
    preserved = (yield from _control_tokens(grammar, url)) if grammar else ()
    return ServerSetup(props, chosen, tool_use_template, bos_token, adds_bos, preserved)


def grammar_text(*templates: ChatTemplate | None) -> str:
    """The reasoning markers and content headers of `templates` (None: no template), one a line: the text whose
    control tokens are preserved."""
    pieces = {
        piece
        for template in templates
        if template is not None
        for piece in (
            template.caps.reasoning.start_marker,
            template.caps.reasoning.end_marker,
            *template.caps.reasoning.content_headers,
        )
        if piece
    }
    return "\n".join(sorted(pieces))


def _adds_bos(bos_token: str, url: str) -> Steps[bool]:
    """Whether a string prompt gets a BOS in front: tokenizing the BOS text with specials added gives it twice."""
    reply = yield ("/tokenize", {"content": bos_token, "add_special": True, "parse_special": True})
    tokens = token_ids(reply, url)
    return len(tokens) >= 2 and tokens[0] == tokens[1]


def _control_tokens(text: str, url: str) -> Steps[tuple[str, ...]]:
    """The control tokens in `text`, as text: those its tokens hold with special tokens parsed and not without."""
    parsed = _pieces((yield ("/tokenize", {**_tokenize(text, special=True), "with_pieces": True})), url)
    plain = set(token_ids((yield ("/tokenize", _tokenize(text, special=False))), url))
    return tuple(sorted({piece for ident, piece in parsed if ident not in plain}))


def tokenize_steps(text: str, url: str) -> Steps[list[int]]:
    """The server's tokens for `text`, special tokens parsed and nothing added."""
    reply = yield ("/tokenize", _tokenize(text, special=True))
    return token_ids(reply, url)


def _tokenize(text: str, *, special: bool) -> dict[str, Any]:
    """A `/tokenize` request for `text`, nothing added, special tokens parsed or not."""
    return {"content": text, "add_special": False, "parse_special": special}


def token_ids(reply: Mapping[str, Any], url: str) -> list[int]:
    """`/tokenize`'s answer: a list of token ids."""
    tokens = reply.get("tokens")
    if not isinstance(tokens, list) or not all(_is_int(token) for token in tokens):
        raise ServerError(f"answered without a list of token ids: {excerpt(reply)}", url=f"{url}/tokenize")
    return tokens


def _pieces(reply: Mapping[str, Any], url: str) -> list[tuple[int, str]]:
    """`/tokenize`'s answer `with_pieces`: (id, text) per token; a piece that is not whole UTF-8 (the server sends
    its bytes) is never a control token, and is left out."""
    tokens = reply.get("tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(token, Mapping) and _is_int(token.get("id")) and isinstance(token.get("piece"), (str, list))
        for token in tokens
    ):
        raise ServerError(f"answered without a list of tokens and pieces: {excerpt(reply)}", url=f"{url}/tokenize")
    return [(token["id"], token["piece"]) for token in tokens if isinstance(token["piece"], str)]


def check_sampling(sampling: Mapping[str, Any]) -> None:
    """`InputError` for a field the client sets itself."""
    reserved = sorted(RESERVED & set(sampling))
    if reserved:
        raise InputError(f"{', '.join(reserved)}: set by the client, not a sampling option")


class LlamaServerBase:
    """A llama-server at `url` as startup found it (`ServerSetup`), and the logic both clients share."""

    def __init__(self, url: str, timeout: float, server_setup: ServerSetup) -> None:
        self.url = url
        self.timeout = timeout
        self.setup = server_setup
        self.props = server_setup.props
        self.template = server_setup.template
        self.tool_use_template = server_setup.tool_use_template
        self.bos_token = server_setup.bos_token
        self.adds_bos = server_setup.adds_bos
        self.preserved_tokens = server_setup.preserved_tokens

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, template={self.template!r}, adds_bos={self.adds_bos})"

    @property
    def model(self) -> str:
        """The model file's name, as llama-server's own `/v1/models` lists it."""
        path = self.props.get("model_path")
        return PurePath(path).name if isinstance(path, str) and path else "llama-server"

    def template_for(self, *, tools: bool) -> ChatTemplate:
        """The template a request renders with: the tool-use template for a request with tools, where there is one."""
        return self.tool_use_template if tools and self.tool_use_template is not None else self.template

    def completion_body(
        self, prompt: str | list[int], sampling: Mapping[str, Any], *, stream: bool = False
    ) -> dict[str, Any]:
        """The `/completion` request for a prompt as `prompt_steps` gives it; `sampling`'s fields as they are
        (a `preserved_tokens` among them replaces the client's: `grammar_fields` joins a grammar's to them)."""
        body = {"preserved_tokens": list(self.preserved_tokens), **sampling, "prompt": prompt}
        return {**body, "stream": True} if stream else body

    def prompt_steps(self, prompt: str) -> Steps[str | list[int]]:
        """What to send so that the server evaluates exactly `prompt`'s tokens (the BOS rule, module docstring)."""
        if not self.adds_bos:
            return prompt
        if self.bos_token and prompt.startswith(self.bos_token):
            return prompt[len(self.bos_token) :]
        return (yield from tokenize_steps(prompt, self.url))

    def completion_steps(self, prompt: str, sampling: Mapping[str, Any], *, stream: bool) -> Steps[dict[str, Any]]:
        """The `/completion` request for a rendered prompt."""
        check_sampling(sampling)
        sent = yield from self.prompt_steps(prompt)
        return self.completion_body(sent, sampling, stream=stream)

    def chat_steps(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        reasoning: Intent,
        template_args: Mapping[str, Any] | None,
        sampling: Mapping[str, Any],
        *,
        stream: bool,
        choice: Choice | None = None,
    ) -> Steps[tuple[RenderResult, dict[str, Any]]]:
        """The render of a chat request and its `/completion` request, with the grammar `choice` asks for
        (`chatcaps.reply.constraint`: `ConstraintError` where the template's format cannot express it)."""
        check_sampling(sampling)
        render = self.template_for(tools=bool(tools)).render(
            messages, tools=tools, reasoning=reasoning, template_args=template_args
        )
        sent = yield from self.prompt_steps(render.prompt)
        found = choice and constraint(
            render.caps,
            tools,
            choice.tool_choice,
            parallel=choice.parallel_tool_calls,
            response_format=choice.response_format,
            prompt=render.prompt,
        )
        fields = self.grammar_fields(found) if found else {}
        return render, self.completion_body(sent, {**sampling, **fields}, stream=stream)

    def grammar_fields(self, found: Constraint) -> dict[str, Any]:
        """`found`'s `/completion` fields, its preserved tokens joined to the client's."""
        fields = found.completion_fields()
        preserved = [*self.preserved_tokens, *fields.get("preserved_tokens", ())]
        return {**fields, "preserved_tokens": list(dict.fromkeys(preserved))}


@dataclass(frozen=True)
class Choice:
    """What a chat request asks the model to keep to, as OpenAI's fields say it: kept to by a grammar."""

    tool_choice: Any = None
    parallel_tool_calls: bool = True
    response_format: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Stop:
    """How a completion ended, from its reply or its last streamed event."""

    stop_type: str
    """"eos", "limit" or "word" (the server's `stop_type`)."""
    prompt_tokens: int
    """`tokens_evaluated`: how many prompt tokens the server read."""
    completion_tokens: int
    """`tokens_predicted`."""


def read_event(event: Mapping[str, Any], url: str) -> tuple[str, Stop | None]:
    """A streamed `/completion` event: its text, and how the completion ended where it is the last (`stop`)."""
    text = event.get("content", "")
    if not isinstance(text, str):
        raise ServerError(f"an event without text content: {excerpt(event)}", url=url)
    return text, read_stop(event, url) if event.get("stop") is True else None


def read_stop(reply: Mapping[str, Any], url: str) -> Stop:
    """The `Stop` in a whole reply or a stream's last event."""
    return Stop(
        str(reply.get("stop_type", "")),
        _count(reply, "tokens_evaluated", url),
        _count(reply, "tokens_predicted", url),
    )


def server_finish(stop_type: str) -> ServerFinish:
    """llama-server's `stop_type` as a backend's reason: "length" where it hit its token limit ("limit")."""
    return "length" if stop_type == "limit" else "stop"


def reply_finish_reason(stop_type: str, tool_calls: Sequence[Mapping[str, Any]]) -> str:
    """OpenAI's finish reason for a reply: "length" at the token limit, "tool_calls" where the model called tools."""
    return finish_reason(server_finish(stop_type), called_tools=bool(tool_calls))


def _count(reply: Mapping[str, Any], key: str, url: str) -> int:
    value = reply.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ServerError(f"the reply has no integer {key!r}: {excerpt(reply)}", url=url)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
