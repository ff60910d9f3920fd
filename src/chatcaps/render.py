"""`ChatTemplate`: a template compiled once, from any source, rendered many times."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from chatcaps import sources
from chatcaps.engines import DEFAULT_LIMITS, EngineName, Limits, Renderer, compile_template, render_conversation
from chatcaps.sources import TemplateSource

PathLike = str | os.PathLike[str]


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
        self.renderer: Renderer = compile_template(source.text, engine=engine, name=source.name, limits=limits)

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
