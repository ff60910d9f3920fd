"""A hook for servers: an OpenAI chat-completions request body in, the prompt and its report out; the model's reply
in, OpenAI's assistant message (or its stream of deltas) out.

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

Every other field (model, sampling, stream, ...) is the server's business and is not read.

On the reply side, `finish_reason` is the server's ("stop", or "length" when it hit its token limit), turned into
"tool_calls" when the model stopped after calling tools, as OpenAI reports it. A message with tool calls and no text
has `content: null`, as OpenAI's. The shapes themselves (message, choice, delta, chunk) are `chatcaps.wire.openai`'s;
the functions here read a `Reply` into them. What was odd about the reply (a missing end marker, text after the end
of turn) is in `Reply.warnings`: `choice(result.parse_reply(text))` keeps the `Reply` at hand to log them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from chatcaps.errors import InputError
from chatcaps.intent import Intent
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply import Reply, ReplyStream
from chatcaps.vocab import shown
from chatcaps.wire import openai

EFFORT_INTENTS: Mapping[str, Intent] = MappingProxyType(
    {
        "none": "off",
        "minimal": "low",
        "low": "low",
        "medium": "medium",
        "high": "high",
        "xhigh": "high",
    }
)
"""OpenAI's `reasoning_effort` values as intents; chatcaps has three tiers, so "minimal" and "xhigh" are the
nearest tier and the result's warnings say so."""
_APPROXIMATE = frozenset({"minimal", "xhigh"})


def prerender(request: Mapping[str, Any], template: ChatTemplate) -> tuple[str, RenderResult]:
    """Render a chat-completions request body with `template`; bad fields raise `InputError` naming the field."""
    if not isinstance(request, Mapping):
        raise InputError(f"the request body must be a JSON object, got {type(request).__name__}", field="request")
    messages = request.get("messages")
    if not isinstance(messages, list):
        raise InputError(f"request.messages must be a list, got {type(messages).__name__}", field="messages")
    intent, notes = reasoning_intent(request)
    template_args = request.get("chat_template_kwargs")
    if template_args is not None and not isinstance(template_args, Mapping):
        raise InputError("request.chat_template_kwargs must be an object", field="chat_template_kwargs")
    result = template.render(
        messages,
        tools=request.get("tools"),
        reasoning=intent,
        template_args=template_args,
        add_generation_prompt=_flag(request, "add_generation_prompt", default=True),
        continue_final_message=_flag(request, "continue_final_message", default=False),
    )
    if notes:
        result = replace(result, warnings=(*result.warnings, *notes))
    return result.prompt, result


def reasoning_intent(request: Mapping[str, Any]) -> tuple[Intent, tuple[str, ...]]:
    """The intent the request asks for, from whichever of its three spellings it uses, and notes on approximations."""
    given = [name for name in ("reasoning_effort", "reasoning", "thinking") if request.get(name) is not None]
    if len(given) > 1:
        raise InputError(f"request sets {' and '.join(given)}; give at most one", field=given[1])
    if not given:
        return None, ()
    name = given[0]
    value = request[name]
    if name == "reasoning":
        if not isinstance(value, Mapping):
            raise InputError('request.reasoning must be an object like {"effort": "low"}', field=name)
        name, value = "reasoning.effort", value.get("effort")
        if value is None:
            return None, ()
    if name == "thinking":
        return _thinking(value), ()
    if not isinstance(value, str) or value not in EFFORT_INTENTS:
        raise InputError(f"request.{name} must be one of {list(EFFORT_INTENTS)}, got {shown(value)}", field=name)
    note = (
        f"{name}={value!r} has no tier of its own; sent as {EFFORT_INTENTS[value]!r}" if value in _APPROXIMATE else ""
    )
    return EFFORT_INTENTS[value], (note,) if note else ()


def _thinking(value: Any) -> Intent:
    """Anthropic's `thinking` object: disabled is off, enabled with `budget_tokens` is that budget."""
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "disabled":
        return "off"
    if kind == "enabled":
        budget = value.get("budget_tokens")
        if budget is None:
            return "on"
        if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0:
            return budget
        raise InputError(
            f"request.thinking.budget_tokens must be an integer >= 0, got {shown(budget)}", field="thinking"
        )
    raise InputError(
        'request.thinking must be {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}', field="thinking"
    )


def _flag(request: Mapping[str, Any], name: str, *, default: bool) -> bool:
    value = request.get(name, default)
    if not isinstance(value, bool):
        raise InputError(f"request.{name} must be true or false, got {shown(value)}", field=name)
    return value


def postprocess(text: str, result: RenderResult, *, finish_reason: str = "stop", raw: bool = False) -> dict[str, Any]:
    """The model's reply to `result`'s prompt as OpenAI's `choices[0]`: `{"index": 0, "message": {...},
    "finish_reason": ...}`. `text` is what the model generated (its end of turn may stay on); `raw=True` keeps the
    reasoning in `content` as generated (llama.cpp's `--reasoning-format none`), tool calls still read."""
    return choice(result.parse_reply(text, raw=raw), finish_reason=finish_reason)


def choice(reply: Reply, *, finish_reason: str = "stop") -> dict[str, Any]:
    """A `Reply` as OpenAI's `choices[0]` (see `postprocess`)."""
    return openai.choice(message(reply), finish(reply, finish_reason))


def message(reply: Reply) -> dict[str, Any]:
    """A `Reply` as OpenAI's assistant message (`Reply.to_message`, `wire.openai.assistant_message`): `content` null
    where the model only called tools."""
    return reply.to_message()


def finish(reply: Reply, finish_reason: str = "stop") -> str:
    """The server's finish reason for `reply` (`wire.openai.finish_reason`): "tool_calls" where the model stopped
    after calling tools."""
    return openai.finish_reason(finish_reason, called_tools=bool(reply.tool_calls))


Applied = tuple[str, str | None, tuple[str, ...]]
"""The grammar a reply was kept to: its kind, the backend that applied it, what it left looser
(`Constraint.loosened`)."""


def report(result: RenderResult, reply: Reply, grammar: Applied | None = None) -> dict[str, Any]:
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
    loosened = {"grammar_loosened": list(grammar[2])} if grammar[2] else {}
    return {**found, "grammar": grammar[0], "backend": grammar[1], **loosened}


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
        return finish(self.reply, finish_reason)
