"""`ChatTemplate`: a template compiled once, its Caps found once, rendered many times — raw, or through the polyfills.

`render` is SPEC section 4: canonical input in, the template's native input out (see `chatcaps.polyfills`), the
reasoning intent mapped onto what the template offers (see `chatcaps.intent`), and a `RenderResult` that says what
was changed and how a server should read the model's reply.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from chatcaps import sources
from chatcaps.caps import Caps
from chatcaps.detect import detect_caps
from chatcaps.engines import DEFAULT_LIMITS, EngineName, Limits, Renderer, compile_template, render_conversation
from chatcaps.engines.conversation import plain_data
from chatcaps.errors import ChatcapsError, InputError
from chatcaps.intent import Intent, IntentPlan, ReasoningRecord, plan_intent, validate_intent
from chatcaps.output import ParsedOutput, parse_output
from chatcaps.polyfills import INTENT, POLYFILLS, Applied, Options, Request, add_flag, run_steps
from chatcaps.polyfills.validate import listed, validate_messages, validate_template_args, validate_tools
from chatcaps.probes.candidates import STANDARD_VARIABLES
from chatcaps.probes.reasoning import Markers, state_of
from chatcaps.probes.text import suffix_after_common
from chatcaps.sources import TemplateSource

PathLike = str | os.PathLike[str]
_PROMPT_PROBE = ({"role": "user", "content": "Hello"},)
"""The conversation a render's generation prompt is measured on (once per distinct kwargs)."""
_POLYFILL_NAMES = frozenset(POLYFILLS)
_DEFAULT_OPTIONS = Options()


@dataclass(frozen=True)
class RenderResult:
    """A rendered prompt and everything a server needs to know about it (SPEC section 4)."""

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
    reasoning_markers: Mapping[str, str | None] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def parse_output(self, text: str) -> ParsedOutput:
        """Split the model's reply to this prompt into reasoning and content (see `chatcaps.output`)."""
        return parse_output(text, self.reasoning_markers, self.starts_in_reasoning)

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


def _unused(args: Mapping[str, Any], caps: Caps) -> tuple[str, ...]:
    """The template_args the template never reads. Apart from `render`, where its generator would make `caps` a
    closure cell."""
    return tuple(name for name in args if name not in caps.template_variables and name not in STANDARD_VARIABLES)


class ChatTemplate:
    """A chat template and the special tokens that came with it, compiled for one engine.

    Build one with a `from_*` constructor (or directly from text) and keep it: compiling is the expensive part.
    Instances are immutable and safe to share between threads.
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
        self.engine: EngineName = engine
        self.limits = limits
        self.renderer: Renderer = compile_template(source.text, engine=engine, name=source.name, limits=limits)
        self._caps: Caps | None = None
        self._prompts: dict[bytes, str] = {}

    @property
    def caps(self) -> Caps:
        """The template's Caps, detected on first use (and cached by `detect_caps`)."""
        if self._caps is None:
            self._caps = detect_caps(
                self.source, bos_token=self.bos_token, eos_token=self.eos_token, engine=self.engine, limits=self.limits
            )
        return self._caps

    def __repr__(self) -> str:
        return f"ChatTemplate({self.source.name!r}, engine={self.engine!r}, sha256={self.source.sha256[:12]}...)"

    @classmethod
    def from_str(cls, text: str, *, name: str = "<string>", **options: Any) -> ChatTemplate:
        return cls(sources.from_str(text, name=name), **options)

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
        return self._render(
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            plain=False,
            template_args=template_args,
        )

    def _render(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        documents: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        continue_final_message: bool | str,
        plain: bool,
        template_args: Mapping[str, Any],
    ) -> str:
        return render_conversation(
            self.renderer,
            messages,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            plain=plain,
            **{"bos_token": self.bos_token, "eos_token": self.eos_token, **template_args},
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
        """Render canonical input (SPEC section 2) natively for this template, through the polyfill pipeline.

        `disable` names polyfills to skip (`chatcaps.POLYFILLS` skips all: the prompt is then `render_raw`'s);
        `separator` joins text blocks for templates that take only strings. Bad input raises `InputError`.
        """
        disabled = frozenset(disable)
        unknown = disabled - _POLYFILL_NAMES
        if unknown:
            raise InputError(f"unknown polyfills {sorted(unknown)}; the names are {list(POLYFILLS)}")
        caps = self.caps
        # Plain JSON data once, up front, as transformers makes it: polyfills and the template see only that.
        plain_messages = plain_data(listed(messages, "messages"))
        plain_tools = plain_data(None if tools is None else listed(tools, "tools"))
        validate_messages(plain_messages, caps)
        validate_tools(plain_tools)
        validate_template_args(template_args)
        intent = validate_intent(reasoning)
        args: dict[str, Any] = plain_data(dict(template_args)) if template_args else {}

        request = Request(tuple(plain_messages), None if plain_tools is None else tuple(plain_tools))
        options = _DEFAULT_OPTIONS if separator == _DEFAULT_OPTIONS.separator else Options(separator=separator)
        request, applied = run_steps(request, caps, options, disabled)
        if INTENT in disabled:
            plan = IntentPlan(ReasoningRecord(intent, "none", exact=intent is None, note="reasoning_intent is off"))
        else:
            plan = plan_intent(intent, caps, args)
        warnings: list[str] = []
        if plan.flag:
            request, done = add_flag(request, caps, plan.flag)
            applied += done
            if not done:
                plan = IntentPlan(ReasoningRecord(intent, "none", exact=False, note=f"no turn to add {plan.flag} to"))
        prefill = plan.prefill if add_generation_prompt and not continue_final_message else ""
        if plan.prefill and not prefill:
            note = "the template has no switch and a prefill needs a generation prompt; nothing was sent"
            warnings.append(note)
            plan = IntentPlan(ReasoningRecord(intent, "none", exact=False, note=note))
        if plan.record.mechanism == "template_args":
            warnings.append(plan.record.note)

        kwargs = {**plan.kwargs, **args}
        prompt = self._render(
            request.messages,
            tools=request.tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            plain=True,  # plain_data ran up front
            template_args=kwargs,
        )
        prompt += prefill
        markers = Markers(caps.reasoning.start_marker, caps.reasoning.end_marker)
        opened = bool(add_generation_prompt and not continue_final_message and markers)
        generation_prompt = self._generation_prompt(kwargs, plan.flag) + prefill if add_generation_prompt else ""
        return RenderResult(
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
            unused_template_args=_unused(args, caps),
            generation_prompt=generation_prompt,
            starts_in_reasoning=opened and state_of(prompt, markers) == "forced_open",
            reasoning_markers={"start": markers.start, "end": markers.end},
            warnings=tuple(warnings),
        )

    def _generation_prompt(self, kwargs: Mapping[str, Any], flag: str | None) -> str:
        """What the generation prompt adds with these kwargs (and system flag): two renders of a one-turn chat, once
        per distinct kwargs; the detected one when nothing is passed."""
        if not kwargs and not flag:
            return self.caps.generation_prompt
        key = orjson.dumps([kwargs, flag], option=orjson.OPT_SORT_KEYS, default=repr)
        found = self._prompts.get(key)
        if found is None:
            request = Request(_PROMPT_PROBE)
            if flag:
                request, _ = add_flag(request, self.caps, flag)
            try:
                without = self.render_raw(request.messages, add_generation_prompt=False, **kwargs)
                with_prompt = self.render_raw(request.messages, add_generation_prompt=True, **kwargs)
                found = suffix_after_common(without, with_prompt)
            except ChatcapsError:
                found = self.caps.generation_prompt
            self._prompts[key] = found
        return found
