"""transformers' own rendering of a context: the reference the parity tests hold the engines to.

Scripts (benchmarks, the minijinja report) import it too, with tests/ on `sys.path`. Needs the `transformers` extra.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from chatcaps.contexts import Context
from chatcaps.outcome import Outcome, capture, template_kwargs


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


def reference_render(template: str, context: Context, *, bos_token: str = "", eos_token: str = "") -> Outcome:
    """transformers' own rendering; any exception it raises is the outcome."""
    return capture(reference_call(template, context, bos_token=bos_token, eos_token=eos_token), Exception)
