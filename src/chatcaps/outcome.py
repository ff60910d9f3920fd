"""A context rendered on one engine exactly as transformers would call the template, kept as an `Outcome`: the
prompt, or the error.

`chatcaps diff --mode raw` compares the two engines' outcomes; the parity tests compare them with transformers' own
rendering (tests/transformers_reference.py).
"""

from __future__ import annotations

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


def capture(render: Callable[[], str], expected: type[BaseException] | tuple[type[BaseException], ...]) -> Outcome:
    """Call `render`: its output, or the `expected` exception it raised, as an Outcome; any other propagates."""
    try:
        return Outcome(render())
    except expected as error:
        return Outcome(None, type(error).__name__, str(error))


def template_kwargs(context: Context, bos_token: str, eos_token: str) -> dict[str, Any]:
    """The keyword arguments transformers' `apply_chat_template` would pass: special tokens, then the context's args."""
    return {"bos_token": bos_token, "eos_token": eos_token, **context.template_args}


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


def engine_render(
    template: str, context: Context, *, engine: EngineName, bos_token: str = "", eos_token: str = ""
) -> Outcome:
    """chatcaps' rendering on `engine`; only chatcaps errors are outcomes, anything else propagates (a bug)."""

    def render() -> str:
        renderer = compile_template(template, engine=engine)
        return engine_call(renderer, context, bos_token=bos_token, eos_token=eos_token)()

    return capture(render, ChatcapsError)
