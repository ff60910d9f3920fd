"""Side-by-side rendering against transformers, the parity reference.

Used by the parity tests, the engine benchmark and the minijinja difference report. Needs the `transformers` extra.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chatcaps.contexts import Context
from chatcaps.engines import EngineName, Renderer, compile_template, render_conversation
from chatcaps.errors import ChatcapsError


@dataclass(frozen=True)
class Outcome:
    """What one render gave: the output, or the error's type and message."""

    output: str | None
    error_type: str | None = None
    error: str | None = None

    @property
    def raised(self) -> bool:
        return self.error_type is not None


def _outcome(render: Callable[[], str], expected: type[BaseException] | tuple[type[BaseException], ...]) -> Outcome:
    try:
        return Outcome(render())
    except expected as error:
        return Outcome(None, type(error).__name__, str(error))


def template_kwargs(context: Context, bos_token: str, eos_token: str) -> dict[str, Any]:
    """The keyword arguments transformers' `apply_chat_template` would pass: special tokens, then the context's args."""
    return {"bos_token": bos_token, "eos_token": eos_token, **context.template_args}


def reference_call(template: str, context: Context, *, bos_token: str = "", eos_token: str = "") -> Callable[[], str]:
    """A no-argument call that renders `context` with transformers' own `render_jinja_template`."""
    from transformers.utils.chat_template_utils import render_jinja_template

    def render() -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result: Any = render_jinja_template(
                conversations=[list(context.messages)],
                tools=None if context.tools is None else list(context.tools),
                chat_template=template,
                add_generation_prompt=context.add_generation_prompt,
                continue_final_message=context.continue_final_message,
                **template_kwargs(context, bos_token, eos_token),
            )
        return str(result[0][0])

    return render


def engine_call(renderer: Renderer, context: Context, *, bos_token: str = "", eos_token: str = "") -> Callable[[], str]:
    """A no-argument call that renders `context` with chatcaps on a compiled template."""
    return lambda: render_conversation(
        renderer,
        context.messages,
        tools=context.tools,
        add_generation_prompt=context.add_generation_prompt,
        continue_final_message=context.continue_final_message,
        **template_kwargs(context, bos_token, eos_token),
    )


def reference_render(template: str, context: Context, *, bos_token: str = "", eos_token: str = "") -> Outcome:
    """transformers' own rendering; any exception it raises is the outcome."""
    return _outcome(reference_call(template, context, bos_token=bos_token, eos_token=eos_token), Exception)


def engine_render(
    template: str, context: Context, *, engine: EngineName, bos_token: str = "", eos_token: str = ""
) -> Outcome:
    """chatcaps' rendering on `engine`; only chatcaps errors are outcomes, anything else propagates (a bug)."""

    def render() -> str:
        renderer = compile_template(template, engine=engine)
        return engine_call(renderer, context, bos_token=bos_token, eos_token=eos_token)()

    return _outcome(render, ChatcapsError)
