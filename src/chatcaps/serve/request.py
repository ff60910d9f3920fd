"""A chat-completions request as the server reads it, and how a generation ended; the answer's shapes are
`chatcaps.wire.openai`'s.

Pure functions and frozen dataclasses, no HTTP: `app.py` moves these objects, the backends generate. Request fields
that select the prompt (messages, tools, the reasoning intent, chat_template_kwargs) are `hook.prerender`'s; this
module reads the ones that steer generation and the stream. A field chatcaps cannot honour is refused by name
(`InputError`), never dropped: `n` > 1, `logprobs`, `logit_bias`. `tool_choice` ("required", a named function,
"none"), `parallel_tool_calls: false` and a JSON `response_format` are kept to by a grammar derived from the
template's call format (`chatcaps.reply.constraint`) where the backend applies one (llama-server), and refused by name
where it does not and the template does not read `tool_choice` itself.
llama.cpp's own sampling fields (`LLAMA_CPP_FIELDS`: `grammar`, `top_k`, `min_p`, ...) are read as they are and
passed to an upstream llama-server, as its own chat endpoint takes them; the transformers backend refuses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from chatcaps.caps import Caps
from chatcaps.errors import InputError
from chatcaps.reply.constraint import Constraint, constraint
from chatcaps.vocab import shown
from chatcaps.wire.openai import ServerFinish

_UNSUPPORTED = ("logprobs", "top_logprobs", "logit_bias")
"""OpenAI fields that ask for something no backend here does; refused when set to anything but their default."""
_DEFAULTS: Mapping[str, tuple[Any, ...]] = {"top_logprobs": (0,)}
CONSTRAINED = ("response_format",)
"""Request fields that only a grammar can honour (`Sampling.constrained`): a backend that applies none refuses them
by name. `tool_choice` is `with_tool_choice`'s: a template that reads it honours it without one."""
"""Values of those fields that ask for what happens anyway (besides null and false)."""
LLAMA_CPP_FIELDS = (
    "grammar",
    "json_schema",
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "repeat_last_n",
    "dynatemp_range",
    "dynatemp_exponent",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_probability",
    "xtc_threshold",
)
"""llama-server's `/completion` sampling fields, beyond OpenAI's, that a request may set (llama-server checks their
values: one it refuses is its 400, answered as a 502 naming that status)."""
_REASONING_FORMATS = ("auto", "deepseek", "none")
_LLAMA_CPP_KINDS: Mapping[str, tuple[type, str]] = {"grammar": (str, "a string"), "json_schema": (dict, "an object")}


@dataclass(frozen=True)
class Sampling:
    """How to generate: OpenAI's sampling fields, None where the request leaves them to the backend."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    llama_cpp: Mapping[str, Any] = field(default_factory=dict)
    """The `LLAMA_CPP_FIELDS` the request set, as given."""
    constrained: tuple[str, ...] = ()
    """The `CONSTRAINED` fields the request sets: a backend that applies no grammar refuses them by name."""
    grammar: Constraint | None = None
    """The constraint to apply, set once the prompt is rendered (`constrain`)."""

    def given(self) -> tuple[str, ...]:
        """The fields the request set (a backend refuses those it cannot honour)."""
        own = ("llama_cpp", "constrained", "grammar")
        named = tuple(name for name, value in self.__dict__.items() if name not in own and value not in (None, ()))
        return named + tuple(self.llama_cpp) + self.constrained


@dataclass(frozen=True)
class Options:
    """What a chat-completions request asks of the server besides the prompt."""

    stream: bool
    include_usage: bool
    sampling: Sampling
    tool_choice: Any = None
    """As given ("auto", "none", "required" or a named function); None when absent."""
    response_format: Mapping[str, Any] | None = None
    """As given, where it asks for JSON; None for text or absent."""
    parallel: bool = True
    """`parallel_tool_calls` (true unless the request says false)."""
    raw: bool = False
    """`reasoning_format: "none"` (llama-server's per-request field): the reasoning stays in `content` as generated,
    markers included; tool calls are still read (`RenderResult.parse_reply(raw=True)`)."""


@dataclass(frozen=True)
class Finished:
    """How generation ended: the backend's token counts and why it stopped ("stop" or "length")."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: ServerFinish
    stop_sequence: str | None = None
    """The stop string that ended the text, where one did."""


def options(request: Mapping[str, Any]) -> Options:
    """The request's stream and sampling fields, checked; `InputError` names the field that is wrong."""
    stream = request.get("stream", False)
    if not isinstance(stream, bool):
        raise InputError(f"request.stream must be true or false, got {shown(stream)}", field="stream")
    stream_options = request.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, Mapping):
        raise InputError("request.stream_options must be an object", field="stream_options")
    include_usage = (stream_options or {}).get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise InputError("request.stream_options.include_usage must be true or false", field="stream_options")
    n = request.get("n")
    if n is not None and (n != 1 or isinstance(n, bool)):
        raise InputError(f"request.n must be 1 (one choice per request), got {shown(n)}", field="n")
    for name in _UNSUPPORTED:
        if request.get(name) not in (None, False, *_DEFAULTS.get(name, ())):
            raise InputError(f"request.{name} is not supported by chatcaps serve", field=name)
    tool_choice, response_format = request.get("tool_choice"), _response_format(request.get("response_format"))
    parallel = request.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise InputError(
            f"request.parallel_tool_calls must be true or false, got {shown(parallel)}", field="parallel_tool_calls"
        )
    max_tokens = _number(request, "max_completion_tokens", int, low=1)
    if max_tokens is None:
        max_tokens = _number(request, "max_tokens", int, low=1)
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=_number(request, "temperature", float, low=0.0, high=2.0),
        top_p=_number(request, "top_p", float, low=0.0, high=1.0),
        seed=_number(request, "seed", int),
        stop=_stop(request.get("stop")),
        presence_penalty=_number(request, "presence_penalty", float, low=-2.0, high=2.0),
        frequency_penalty=_number(request, "frequency_penalty", float, low=-2.0, high=2.0),
        llama_cpp=llama_cpp_fields(request),
        constrained=("response_format",) if response_format is not None else (),
    )
    raw = _raw(request.get("reasoning_format"))
    return Options(stream, include_usage, sampling, tool_choice, response_format, parallel, raw)


def _response_format(value: Any) -> Mapping[str, Any] | None:
    """`response_format` where it asks for JSON (`json_object`, `json_schema` with a schema); None for text."""
    if value is None or value == {"type": "text"}:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    spec = value.get("json_schema") if isinstance(value, Mapping) else None
    if kind == "json_object" or (kind == "json_schema" and isinstance(spec, Mapping) and "schema" in spec):
        return value  # type: ignore[no-any-return]
    raise InputError(
        'request.response_format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
        f'"json_schema": {{"schema": ...}}}}, got {shown(value)}',
        field="response_format",
    )


def _number(
    request: Mapping[str, Any], name: str, kind: type[float], *, low: float | None = None, high: float | None = None
) -> Any:
    value = request.get(name)
    if value is None:
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if not numeric or (kind is int and not isinstance(value, int)):
        raise InputError(
            f"request.{name} must be {'an integer' if kind is int else 'a number'}, got {shown(value)}", field=name
        )
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise InputError(f"request.{name} must be {bounds}, got {value}", field=name)
    return kind(value)


def _raw(value: Any) -> bool:
    """llama-server's `reasoning_format`: "none" keeps the reasoning in `content`; "auto" and "deepseek" split it out,
    which is what chatcaps does anyway ("deepseek-legacy", both at once, is not offered)."""
    if value is None or value in _REASONING_FORMATS:
        return bool(value == "none")
    raise InputError(
        f"request.reasoning_format must be one of {list(_REASONING_FORMATS)}, got {shown(value)}",
        field="reasoning_format",
    )


def llama_cpp_fields(request: Mapping[str, Any]) -> dict[str, Any]:
    """The `LLAMA_CPP_FIELDS` the request sets, as given (the two that have a type checked)."""
    given = {name: request[name] for name in LLAMA_CPP_FIELDS if request.get(name) is not None}
    for name, (kind, said) in _LLAMA_CPP_KINDS.items():
        if name in given and not isinstance(given[name], kind):
            raise InputError(f"request.{name} must be {said}, got {shown(given[name])}", field=name)
    return given


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value) and len(value) <= 4:
        return tuple(value)
    raise InputError(f"request.stop must be a string or a list of up to 4 strings, got {shown(value)}", field="stop")


def with_tool_choice(
    request: Mapping[str, Any],
    tool_choice: Any,
    caps: Caps,
    *,
    constrained: bool = False,
    spelled: tuple[str, str] | None = None,
) -> Mapping[str, Any]:
    """The request with `tool_choice` passed to the template where it reads the variable; elsewhere, unless a grammar
    keeps the model to it (`constrained`), only "auto" (what a model does with tools anyway) is accepted. The refusal
    names the choice, and "auto", as the client's API spells them (`spelled`; OpenAI's by default)."""
    if tool_choice is None:
        return request
    if "tool_choice" in caps.template_variables:
        kwargs = request.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            return request  # prerender names the field
        return {**request, "chat_template_kwargs": {"tool_choice": tool_choice, **(kwargs or {})}}
    if tool_choice == "auto" or constrained:
        return request
    choice, auto = spelled or (shown(tool_choice), '"auto"')
    raise InputError(
        f"request.tool_choice {choice} cannot be honoured: the template does not read tool_choice and this backend "
        f"applies no grammar (send {auto} or leave it out)",
        field="tool_choice",
    )


def constrain(options: Options, caps: Caps, tools: Any, prompt: str, *, lazy: bool = True) -> Sampling:
    """The request's sampling with the grammar it asks for (`chatcaps.reply.constraint`; "auto" with tools is a lazy
    grammar on the call opener), for a backend that applies grammars; `ConstraintError` (an `InputError`) where the
    template's format cannot express it. A request's own `grammar` or `json_schema` is kept, and then no other.
    Without `lazy` (a backend whose grammars cannot wait for a trigger), "auto" stays free."""
    sampling = options.sampling
    own = [name for name in ("grammar", "json_schema") if name in sampling.llama_cpp]
    asked = [*sampling.constrained, *(["tool_choice"] if options.tool_choice not in (None, "auto") else [])]
    if own and asked:
        raise InputError(f"request.{own[0]} and request.{asked[0]} both constrain generation; send one", field=own[0])
    if own:
        return sampling
    found = constraint(
        caps,
        tools if isinstance(tools, list) else None,
        options.tool_choice,
        parallel=options.parallel,
        response_format=options.response_format,
        prompt=prompt,
    )
    return replace(sampling, grammar=None if found is not None and found.kind == "lazy" and not lazy else found)
