"""`ChatTemplate`: a template compiled once, its Caps found once, rendered many times — raw, or through the polyfills.

`render`: canonical input in, the template's native input out (see `chatcaps.polyfills`), the
reasoning intent mapped onto what the template offers (see `chatcaps.intent`), and a `RenderResult` that says what
was changed and how a server should read the model's reply.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from types import MappingProxyType
from typing import Any

import orjson

from chatcaps import continuation, encoders, sources
from chatcaps.caps import Caps
from chatcaps.contexts import Context
from chatcaps.defaults import PROMPTS_PER_TEMPLATE
from chatcaps.detect import detect_caps
from chatcaps.engines import DEFAULT_LIMITS, EngineName, Limits, Renderer, compile_template, render_conversation
from chatcaps.engines.conversation import plain_data, render_checked
from chatcaps.errors import ChatcapsError, InputError
from chatcaps.intent import Intent, IntentPlan, ReasoningRecord, validate_intent
from chatcaps.lru import LastUsed
from chatcaps.output import ParsedOutput, parse_output
from chatcaps.polyfills import (
    INTENT,
    POLYFILLS,
    Applied,
    Options,
    Request,
    add_flag,
    live_steps,
    run_pipeline,
)
from chatcaps.polyfills.base import NO_ARGS, Polyfill
from chatcaps.polyfills.validate import listed, validate_messages, validate_template_args, validate_tools
from chatcaps.reply import Reply, ReplyContext, ReplyStream, response_template
from chatcaps.request import ChatRequest
from chatcaps.sources import TemplateSource
from chatcaps.vocab import (
    STANDARD_VARIABLES,
    Markers,
    added_after,
    state_of,
)

PathLike = str | os.PathLike[str]
_PROMPT_PROBE = ({"role": "user", "content": "Hello"},)
"""The conversation a render's generation prompt is measured on (once per distinct kwargs)."""
_POLYFILL_NAMES = frozenset(POLYFILLS)
_DEFAULT_OPTIONS = Options()
_WORD_OPTIONS: dict[tuple[Intent, bool, bool], Options] = {(None, True, False): _DEFAULT_OPTIONS}
"""The options of requests that send at most a reasoning word (no budget, template_args or separator), by intent
and prefill: a few entries, made once."""
_NOTHING_DISABLED: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RenderResult:
    """A rendered prompt and everything a server needs to know about it."""

    prompt: str
    messages: tuple[dict[str, Any], ...]
    """The messages as the template received them, after polyfills."""
    template_kwargs: Mapping[str, Any]
    """Every variable passed to the template besides `messages`."""
    applied: tuple[Applied, ...]
    reasoning: ReasoningRecord
    unused_template_args: tuple[str, ...]
    generation_prompt: str
    """What the generation prompt (with any prefill) adds for these kwargs; "" when none was asked for."""
    starts_in_reasoning: bool
    """The model's output begins inside an open reasoning block: parse it as reasoning up to the end marker."""
    caps: Caps = field(repr=False, compare=False)
    """The template's Caps: the reply grammar (`chatcaps.reply`) is derived from them."""
    reasoning_markers: Mapping[str, str | None] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    tools: tuple[dict[str, Any], ...] | None = None
    """The tools as the request gave them (before polyfills): the parser types call arguments from their schemas."""
    continue_from: Callable[[], tuple[str, str]] | None = field(default=None, repr=False, compare=False)
    """With `continue_final_message`: how to find where the reply is read from and `continued` (a render of the
    conversation before the final message; `ReplyContext.continue_from`), done only once a reply is read, so a
    render that is never parsed does not pay for it."""

    @property
    def end_of_turn(self) -> str | None:
        """What the template writes after an assistant message (`Caps.end_of_turn`); None where it writes nothing."""
        return self.caps.end_of_turn or None

    @cached_property
    def reply_context(self) -> ReplyContext:
        """What reading the model's reply to this prompt needs (`chatcaps.reply.ReplyContext`): the Caps, the prompt
        where the reply continues it, the request's tools and what a continued message already wrote."""
        kwargs = self.template_kwargs
        # After a generation prompt or in a continued message the reply continues the prompt. Otherwise the prompt
        # ends with a finished turn, whose last assistant header is a past turn's: the text is the whole message.
        continues = kwargs.get("add_generation_prompt") or kwargs.get("continue_final_message")
        return ReplyContext(self.caps, self.prompt if continues else "", self.tools, continue_from=self.continue_from)

    @property
    def continued(self) -> str:
        """With `continue_final_message`: what the prompt already holds of the final message (an unfinished reasoning
        block, the start of an answer), past the generation prompt the conversation before it gets, or past the
        header the two share where the template writes the message's reasoning without the generation prompt's own
        opening text; "" where neither is found. The reply is read as this text followed by what the model
        generates."""
        return self.reply_context.continued

    def parse_output(self, text: str) -> ParsedOutput:
        """Split the model's reply to this prompt into reasoning and content (`chatcaps.output.parse_output`)."""
        return parse_output(text, self.caps, self.starts_in_reasoning)

    def parse_reply(self, text: str, *, raw: bool = False) -> Reply:
        """Read the model's reply to this prompt: reasoning, content and tool calls (`ReplyContext.parse`)."""
        return self.reply_context.parse(text, raw=raw)

    def reply_stream(self, *, raw: bool = False) -> ReplyStream:
        """`parse_reply` as the reply streams: OpenAI `chat.completion.chunk` deltas (`ReplyContext.stream`)."""
        return self.reply_context.stream(raw=raw)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "messages": list(self.messages),
            "template_kwargs": dict(self.template_kwargs),
            "applied": [record.to_dict() for record in self.applied],
            "reasoning": self.reasoning.to_dict(),
            "unused_template_args": list(self.unused_template_args),
            "generation_prompt": self.generation_prompt,
            "starts_in_reasoning": self.starts_in_reasoning,
            "reasoning_markers": dict(self.reasoning_markers),
            "warnings": list(self.warnings),
        }


def _result(**fields: Any) -> RenderResult:
    """`RenderResult(**fields)` for `render`, which passes every field: the generated `__init__` of a frozen
    dataclass sets each field through `object.__setattr__`, a measurable part of a short render at ten fields."""
    result = object.__new__(RenderResult)
    result.__dict__.update(fields)
    return result


def _unused(args: Mapping[str, Any], caps: Caps) -> tuple[str, ...]:
    """The template_args the template never reads."""
    if not args:
        return ()
    return tuple(name for name in args if name not in caps.template_variables and name not in STANDARD_VARIABLES)


class ChatTemplate:
    """A chat template and the special tokens that came with it, compiled for one engine.

    Build one with a `from_*` constructor (or directly from text) and keep it: compiling is the expensive part.
    Instances are immutable and safe to share between threads: what they keep as they go (the Caps, the generation
    prompt per distinct kwargs, at most `PROMPTS_PER_TEMPLATE` of them) is bounded and guarded.
    """

    def __init__(
        self,
        template: str | TemplateSource,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        engine: EngineName = "jinja2",
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        source = template if isinstance(template, TemplateSource) else sources.from_str(template)
        self.source = source
        self.bos_token = source.bos_token if bos_token is None else bos_token
        self.eos_token = source.eos_token if eos_token is None else eos_token
        self.engine: EngineName = "encoder" if source.origin == "encoder" else engine
        self.limits = limits
        self.renderer: Renderer = compile_template(source.text, engine=self.engine, name=source.name, limits=limits)
        self._caps: Caps | None = None
        self._prompts: LastUsed[bytes, str] = LastUsed(PROMPTS_PER_TEMPLATE)
        self._step_sets: dict[tuple[bool, bool, bool], tuple[Polyfill, ...]] = {}

    def _steps(self, disabled: frozenset[str], shape: tuple[bool, bool, bool]) -> tuple[tuple[Polyfill, ...], bool]:
        """The pipeline's steps for this template and a request of this shape (see `live_steps`), and whether the
        intent runs; with nothing disabled, the usual case, made once per shape."""
        if not disabled:
            steps = self._step_sets.get(shape)
            if steps is None:
                steps = self._step_sets[shape] = self._live_steps(disabled, shape)
            return steps, True
        return self._live_steps(disabled, shape), INTENT not in disabled

    def _live_steps(self, disabled: frozenset[str], shape: tuple[bool, bool, bool]) -> tuple[Polyfill, ...]:
        text_chat, canonical, content_only = shape
        return live_steps(self.caps, disabled, text_chat=text_chat, canonical=canonical, content_only=content_only)

    @cached_property
    def _markers(self) -> tuple[Markers | None, Mapping[str, str | None]]:
        """The Caps' reasoning markers (None when it has neither), and as `RenderResult.reasoning_markers` gives them
        (read-only, shared)."""
        reasoning = self.caps.reasoning
        markers = Markers(reasoning.start_marker, reasoning.end_marker)
        return markers or None, MappingProxyType({"start": markers.start, "end": markers.end})

    @property
    def end_of_turn(self) -> str | None:
        """What the template writes after an assistant message (`<|im_end|>`, `<|eot_id|>`, the eos token, ...), so
        that a reply still carrying it parses cleanly; None where it writes nothing (`Caps.end_of_turn`)."""
        return self.caps.end_of_turn or None

    def response_template(self) -> dict[str, Any]:
        """The template's reply grammar as a transformers `response_template`: set it as
        `tokenizer.response_template` and `tokenizer.parse_response` reads this model's replies."""
        return response_template(self.caps)

    @cached_property
    def caps_key(self) -> bytes:
        """The Caps' JSON (`Caps.to_json`), made once: what caches keyed by the Caps (the grammars of
        `chatcaps.reply.constraint`) are keyed by, rather than the Caps serialised again per request."""
        return self.caps.to_json()

    @property
    def caps(self) -> Caps:
        """The template's Caps, detected on first use (and cached by `detect_caps`)."""
        if self._caps is None:
            caps = detect_caps(
                self.source, bos_token=self.bos_token, eos_token=self.eos_token, engine=self.engine, limits=self.limits
            )
            renderer = self.renderer
            if isinstance(renderer, encoders.EncoderRenderer):  # what only its parameters say, marked declared
                caps = encoders.declared(caps, renderer.encoder)
            self._caps = caps
            # The parse tree a jinja2 renderer holds for detection's source reading: taken if detection ran, never
            # needed if the Caps came from a cache; dropped either way rather than kept for the renderer's life.
            self.renderer.source_tree()
        return self._caps

    def __repr__(self) -> str:
        return f"ChatTemplate({self.source.name!r}, engine={self.engine!r}, sha256={self.source.sha256[:12]}...)"

    @classmethod
    def from_str(cls, text: str, *, name: str = "<string>", **options: Any) -> ChatTemplate:
        return cls(sources.from_str(text, name=name), **options)

    @classmethod
    def from_encoder(cls, name: str, **options: Any) -> ChatTemplate:
        """A model's prompt encoder (`chatcaps.encoders`: "deepseek-v3.2") as a template: rendered by the encoder,
        its Caps probed through it."""
        return cls(sources.from_encoder(name), **options)

    @classmethod
    def from_mistral(cls, path_or_version: PathLike, **options: Any) -> ChatTemplate:
        """A Mistral tokenizer file (`tekken.json`, `tokenizer.model.v*`), or one mistral-common ships by version
        name ("v3", "tekken"), as a template: the prompt is mistral-common's `encode_chat_completion`, its Caps
        probed through it (needs `chatcaps[mistral]`)."""
        return cls(sources.from_mistral(path_or_version), **options)

    @classmethod
    def from_file(cls, path: PathLike, **options: Any) -> ChatTemplate:
        return cls(sources.from_file(path), **options)

    @classmethod
    def from_dir(cls, path: PathLike, *, name: str | None = None, **options: Any) -> ChatTemplate:
        return cls(sources.from_dir(path, name=name), **options)

    @classmethod
    def from_tokenizer_config(
        cls, config: PathLike | Mapping[str, Any], *, name: str | None = None, **options: Any
    ) -> ChatTemplate:
        return cls(sources.from_tokenizer_config(config, name=name), **options)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, *, name: str | None = None, **options: Any) -> ChatTemplate:
        """A loaded transformers tokenizer's template (`name` picks one of several), with its bos/eos tokens."""
        return cls(sources.from_tokenizer(tokenizer, name=name), **options)

    @classmethod
    def from_hub(
        cls,
        repo_id: str,
        revision: str | None = None,
        name: str | None = None,
        *,
        cache_dir: PathLike | None = None,
        **options: Any,
    ) -> ChatTemplate:
        return cls(sources.from_hub(repo_id, revision=revision, name=name, cache_dir=cache_dir), **options)

    @classmethod
    def from_gguf(cls, path: PathLike, *, name: str | None = None, **options: Any) -> ChatTemplate:
        return cls(sources.from_gguf(path, name=name), **options)

    @classmethod
    def from_llama_server(cls, url: str, *, name: str | None = None, **options: Any) -> ChatTemplate:
        """The template a running llama-server uses (its `/props`), with the server's bos/eos tokens."""
        return cls(sources.from_llama_server(url, name=name), **options)

    def render_context(self, context: Context) -> RenderResult:
        """One canonical test context (`chatcaps.contexts`: its messages, tools, reasoning intent, template args and
        flags) rendered with polyfills, as `chatcaps render --messages` and the zoo site show it."""
        return self.render(
            context.messages,
            tools=context.tools,
            reasoning=validate_intent(context.reasoning),
            template_args=context.template_args,
            add_generation_prompt=context.add_generation_prompt,
            continue_final_message=context.continue_final_message,
        )

    def render_raw(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool | str = False,
        **template_args: Any,
    ) -> str:
        """Render exactly as transformers' `apply_chat_template(tokenize=False)` would: no polyfills.

        `bos_token` and `eos_token` are passed as transformers passes the tokenizer's special tokens;
        `template_args` override them.
        """
        return render_conversation(
            self.renderer,
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            **{"bos_token": self.bos_token, "eos_token": self.eos_token, **template_args},
        )

    def render_request(self, request: ChatRequest, *, disable: Collection[str] = ()) -> RenderResult:
        """`render` of a `ChatRequest` (the hook's and the CLI's reading): its messages, tools, reasoning intent,
        template args and generation flags."""
        return self.render(
            request.messages,
            tools=request.tools,
            reasoning=request.reasoning,
            template_args=request.template_args,
            add_generation_prompt=request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            disable=disable,
        )

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        reasoning: Intent = None,
        template_args: Mapping[str, Any] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        disable: Collection[str] = (),
        separator: str = "\n",
    ) -> RenderResult:
        """Render canonical input (docs/polyfills.md) natively for this template, through the polyfill pipeline.

        `disable` names polyfills to skip (`chatcaps.POLYFILLS` skips all: the prompt is then `render_raw`'s);
        `separator` joins text blocks for templates that take only strings. Bad input raises `InputError`.

        `continue_final_message` on an assistant message with reasoning and no content yet resumes inside the
        reasoning block: the prompt ends with the reasoning text, no end marker written (`chatcaps.continuation`).
        """
        disabled = _disabled(disable)
        caps = self.caps
        request, shape = _request(messages, tools, caps)
        given_tools = request.tools
        steps, intent = self._steps(disabled, shape)
        prefill = add_generation_prompt and not continue_final_message
        options = _options(reasoning, template_args, prefill, separator, continue_final_message)
        request, applied, plan = run_pipeline(request, caps, options, steps, intent)
        kwargs = {**plan.kwargs, **options.template_args} if plan.kwargs or options.template_args else {}
        render = self._render_request
        prompt, notes = continuation.rendered(
            render, caps, request, kwargs, add_generation_prompt, continue_final_message
        )
        prompt += plan.prefill
        result = self._report(
            prompt, request, applied, plan, kwargs, options, add_generation_prompt, continue_final_message, given_tools
        )
        if not continue_final_message:
            return result
        if messages and messages[-1].get("role") == "assistant":
            continuation.check(request, len(messages) - 1)
        continued = partial(continuation.read_from, render, caps, request, kwargs, prompt, len(messages) - 1)
        return replace(result, warnings=(*result.warnings, *notes), continue_from=continued)

    def _render_request(
        self, request: Request, kwargs: dict[str, Any], add_generation_prompt: bool, continue_final_message: bool | str
    ) -> str:
        """The template run on the pipeline's output, which `_request` and `_options` made plain data and checked."""
        tools = None if request.tools is None else list(request.tools)
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, **kwargs, "tools": tools}
        variables["documents"] = None
        return render_checked(self.renderer, request.messages, variables, add_generation_prompt, continue_final_message)

    def _report(
        self,
        prompt: str,
        request: Request,
        applied: tuple[Applied, ...],
        plan: IntentPlan,
        kwargs: dict[str, Any],
        options: Options,
        add_generation_prompt: bool,
        continue_final_message: bool,
        given_tools: tuple[dict[str, Any], ...] | None,
    ) -> RenderResult:
        """What `render` hands back: the prompt, what the template got, and how to read the model's reply (with the
        request's tools, `given_tools`, not what the polyfills left for the template)."""
        caps = self.caps
        markers, marker_map = self._markers
        generation_prompt = self._generation_prompt(kwargs, plan.flag) + plan.prefill if add_generation_prompt else ""
        return _result(
            prompt=prompt,
            messages=request.messages,
            template_kwargs={
                "tools": None if request.tools is None else list(request.tools),
                "add_generation_prompt": add_generation_prompt,
                "continue_final_message": continue_final_message,
                "bos_token": self.bos_token,
                "eos_token": self.eos_token,
                **kwargs,
            },
            applied=applied,
            reasoning=plan.record,
            unused_template_args=_unused(options.template_args, caps),
            generation_prompt=generation_prompt,
            starts_in_reasoning=options.prefill and markers is not None and state_of(prompt, markers) == "forced_open",
            caps=caps,
            reasoning_markers=marker_map,
            warnings=plan.warnings,
            tools=given_tools,
            continue_from=None,
        )

    def _generation_prompt(self, kwargs: Mapping[str, Any], flag: str | None) -> str:
        """What the generation prompt adds with these kwargs (and system flag): two renders of a one-turn chat, once
        per distinct kwargs (the last `PROMPTS_PER_TEMPLATE` kept); the detected one when nothing is passed."""
        if not kwargs and not flag:
            return self.caps.generation_prompt
        key = orjson.dumps([kwargs, flag], option=orjson.OPT_SORT_KEYS, default=repr)
        found = self._prompts.get(key)
        if found is None:
            found = self._measure_prompt(kwargs, flag)
            self._prompts.put(key, found)
        return found

    def _measure_prompt(self, kwargs: Mapping[str, Any], flag: str | None) -> str:
        request = Request(_PROMPT_PROBE)
        if flag:
            request, _ = add_flag(request, self.caps, flag)
        try:
            without = self.render_raw(request.messages, add_generation_prompt=False, **kwargs)
            with_prompt = self.render_raw(request.messages, add_generation_prompt=True, **kwargs)
        except ChatcapsError:
            return self.caps.generation_prompt
        return added_after(without, with_prompt)


def _disabled(disable: Collection[str]) -> frozenset[str]:
    if not disable:
        return _NOTHING_DISABLED
    disabled = frozenset(disable)
    unknown = disabled - _POLYFILL_NAMES
    if unknown:
        raise InputError(f"unknown polyfills {sorted(unknown)}; the names are {list(POLYFILLS)}")
    return disabled


def _request(
    messages: Sequence[Any], tools: Sequence[Any] | None, caps: Caps
) -> tuple[Request, tuple[bool, bool, bool]]:
    """The messages and tools as plain JSON data, as transformers makes them, and checked: polyfills and the template
    see only that. With it, its shape: whether it is a text chat (`is_text_chat`), whether it is canonical already
    (see `validate_messages`), and whether it is a content-only chat (`is_content_only`)."""
    # `plain_data` copies a list itself: `listed` only for other iterables (and to refuse what is not one).
    plain_messages = plain_data(messages if type(messages) is list else listed(messages, "messages"))
    plain_tools = None if tools is None else plain_data(tools if type(tools) is list else listed(tools, "tools"))
    text_chat, canonical, content_only = validate_messages(plain_messages, caps)
    validate_tools(plain_tools)
    request = Request(tuple(plain_messages), None if plain_tools is None else tuple(plain_tools))
    return request, (text_chat and plain_tools is None, canonical, content_only and plain_tools is None)


def _options(
    reasoning: object, template_args: Mapping[str, Any] | None, prefill: bool, separator: str, continued: bool
) -> Options:
    """The rest of the request, checked (the template args as plain data); a shared instance when no more than a
    reasoning word is asked for, the usual case."""
    validate_template_args(template_args)
    intent = validate_intent(reasoning)
    if not template_args and separator == _DEFAULT_OPTIONS.separator and not isinstance(intent, int):
        # Options are read-only: one per intent word and prefill, as most requests send no more than that.
        key = (intent, prefill, continued)
        options = _WORD_OPTIONS.get(key)
        if options is None:
            options = _WORD_OPTIONS[key] = Options(reasoning=intent, prefill=prefill, continued=continued)
        return options
    args = plain_data(template_args) if template_args else NO_ARGS  # a dict, whatever mapping it was given
    return Options(separator=separator, reasoning=intent, template_args=args, prefill=prefill, continued=continued)
