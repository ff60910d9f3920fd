"""A hook for servers: an OpenAI chat-completions request body (or a `ChatRequest`, read from any API's body) in,
the prompt and its report out; the model's reply in, OpenAI's assistant message (or its stream of deltas) out.

A server that can generate from a raw prompt adopts chatcaps by calling `prerender(body, template)` where it would
have applied the chat template, and `postprocess(text, result)` where it would have run a reasoning parser and a
tool-call parser picked for the model: the reply is read with the template's own grammar
(`RenderResult.parse_reply`, docs/reply.md), so no parser is chosen by hand. Streaming, `PostStream(result)` turns the
generated pieces into `chat.completion.chunk` deltas. The request fields read here are the ones servers already
accept for rendering:

- `messages`, `tools`: canonical input (docs/polyfills.md);
- `reasoning_effort` (OpenAI; "none" ... "xhigh"), `reasoning: {"effort"}` (OpenAI Responses style),
  `thinking: {"type": "enabled", "budget_tokens"} | {"type": "disabled"}` (Anthropic style): the reasoning intent;
  at most one of the three;
- `chat_template_kwargs` (vLLM, llama-server): `template_args`, passed through and winning over the intent;
- `add_generation_prompt`, `continue_final_message` (vLLM).

Every other field (model, sampling, stream, ...) is the server's business and is not read
(`chatcaps.wire.openai.read_prompt` reads these; `read_chat` the rest too, for `chatcaps serve`).

On the reply side, `finish_reason` is the server's ("stop", or "length" when it hit its token limit), turned into
"tool_calls" when the model stopped after calling tools, as OpenAI reports it. A message with tool calls and no text
has `content: null`, as OpenAI's. The shapes themselves (message, choice, delta, chunk) are `chatcaps.wire.openai`'s;
the functions here read a `Reply` into them. What was odd about the reply (a missing end marker, text after the end
of turn) is in `Reply.warnings`: `choice(result.parse_reply(text))` keeps the `Reply` at hand to log them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from chatcaps.errors import InputError
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply import Reply, ReplyStream
from chatcaps.request import ChatRequest
from chatcaps.wire import openai
from chatcaps.wire.openai import EFFORT_INTENTS as EFFORT_INTENTS
from chatcaps.wire.openai import reasoning_intent as reasoning_intent


def prerender(request: Mapping[str, Any] | ChatRequest, template: ChatTemplate) -> tuple[str, RenderResult]:
    """Render a request with `template`: a `ChatRequest`, or a chat-completions body (its prompt's fields read by
    `wire.openai.read_prompt`); bad fields raise `InputError` naming the field as the client's body has it. The
    request's notes join the render's warnings."""
    if not isinstance(request, ChatRequest):
        request = openai.read_prompt(request)
    try:
        result = template.render_request(request)
    except InputError as error:
        located = request.located(error)
        if located is error:
            raise
        raise located from error
    if request.notes:
        result = replace(result, warnings=(*result.warnings, *request.notes))
    return result.prompt, result


def postprocess(text: str, result: RenderResult, *, finish_reason: str = "stop", raw: bool = False) -> dict[str, Any]:
    """The model's reply to `result`'s prompt as OpenAI's `choices[0]`: `{"index": 0, "message": {...},
    "finish_reason": ...}`. `text` is what the model generated (its end of turn may stay on); `raw=True` keeps the
    reasoning in `content` as generated (llama.cpp's `--reasoning-format none`), tool calls still read."""
    return choice(result.parse_reply(text, raw=raw), finish_reason=finish_reason)


def choice(reply: Reply, *, finish_reason: str = "stop") -> dict[str, Any]:
    """A `Reply` as OpenAI's `choices[0]` (see `postprocess`)."""
    return openai.choice(message(reply), finish_reason_of(reply, finish_reason))


def message(reply: Reply) -> dict[str, Any]:
    """A `Reply` as OpenAI's assistant message (`Reply.to_message`, `wire.openai.assistant_message`): `content` null
    where the model only called tools."""
    return reply.to_message()


def finish_reason_of(reply: Reply, server: str = "stop") -> str:
    """The finish reason to answer for `reply`, the backend's being `server` (`wire.openai.finish_reason`):
    "tool_calls" where the model stopped after calling tools."""
    return openai.finish_reason(server, called_tools=bool(reply.tool_calls))


@dataclass(frozen=True)
class Grammar:
    """The grammar a generation was kept to (`chatcaps.reply.constraint`'s kind: "required", "named", "lazy",
    "none", "json_schema"), what applied it (the backend's name) and what it left looser (`Constraint.loosened`)."""

    kind: str
    backend: str | None
    loosened: tuple[str, ...] = ()


def report(result: RenderResult, reply: Reply, grammar: Grammar | None = None) -> dict[str, Any]:
    """chatcaps' account of one request, the `chatcaps` field `chatcaps serve` adds to its responses: what the render
    changed and the reasoning record (intent against what was emitted), then how the reply was read; where a grammar
    kept the model to a format (`chatcaps.reply.constraint`), which (`grammar`: "required", "named", "lazy", "none",
    "json_schema"), on which backend, and what it did not enforce (`grammar_loosened`, where anything: a schema
    keyword, each `tool: keyword at path`, or a tool left free); all absent where none was applied."""
    found = {
        "applied": [record.to_dict() for record in result.applied],
        "reasoning": result.reasoning.to_dict(),
        "unused_template_args": list(result.unused_template_args),
        "warnings": list(result.warnings),
        "reply": {"finish": reply.finish, "warnings": list(reply.warnings)},
    }
    if grammar is None:
        return found
    loosened = {"grammar_loosened": list(grammar.loosened)} if grammar.loosened else {}
    return {**found, "grammar": grammar.kind, "backend": grammar.backend, **loosened}


class PostStream:
    """`postprocess` for a streamed reply: the `delta` of each `chat.completion.chunk` (`ReplyStream`'s deltas, the
    role first, the finish reason at the end; `wire.openai.Chunks` wraps them in chunks).

    `initial` holds the first deltas (the role, then what the prompt already wrote of the message: a prefilled
    answer); `feed` each generated piece and send the deltas it returns (often none: text that may still be a
    marker is held); `close` gives the last deltas once generation ends, and `finish_reason(...)` then the last
    chunk's finish reason. `reply` is the `Reply` `parse_reply` gives for the whole text, warnings included.
    """

    def __init__(self, result: RenderResult, *, raw: bool = False) -> None:
        self._stream: ReplyStream = result.reply_stream(raw=raw)
        self.initial: list[dict[str, Any]] = [openai.role_delta(), *self._stream.initial]

    def feed(self, text: str) -> list[dict[str, Any]]:
        return list(self._stream.feed(text))

    def close(self) -> list[dict[str, Any]]:
        return list(self._stream.close())

    @property
    def reply(self) -> Reply:
        return self._stream.reply

    def finish_reason(self, finish_reason: str = "stop") -> str:
        """The server's finish reason for the closed stream, "tool_calls" where the model called tools."""
        return finish_reason_of(self.reply, finish_reason)
