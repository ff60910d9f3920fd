"""The request's reasoning intent onto the template's own controls, inside vLLM (docs/vllm.md, "Reasoning controls").

vLLM hands a template `reasoning_effort` and `enable_thinking` (true unless the effort is "none"), which a template
whose control is another variable (`thinking`, a budget) never reads. `vllm serve MODEL --tokenizer-mode chatcaps`
selects `ChatcapsRenderer`: vLLM's own renderer for Hugging Face templates and its own tokenizer, with the template
kwargs of each request replaced by what `chatcaps.hook` plans for its effort (the tokenizer mode and the renderer are
registered by `chatcaps.integrations.vllm.register`, as vLLM registers its own modes that change only the template
stage). A plan that is not kwargs (a system-turn flag, a prefill) is not carried: vLLM renders the messages as given.

A module of its own: vLLM's renderer imports torch, which the parsers' module, loaded in every vLLM process, does not
need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from vllm.logger import init_logger  # type: ignore[import-not-found,unused-ignore]
from vllm.renderers.hf import HfRenderer  # type: ignore[import-not-found,unused-ignore]

from chatcaps import hook
from chatcaps.errors import ChatcapsError
from chatcaps.integrations.vllm import template_of
from chatcaps.render import ChatTemplate
from chatcaps.vocab import STANDARD_VARIABLES

logger = init_logger(__name__)
VLLM_ADDS = ("reasoning_effort", "enable_thinking")
"""What vLLM adds to a request's template kwargs for its effort."""


def template_kwargs(
    messages: Sequence[Mapping[str, Any]], kwargs: Mapping[str, Any], template: ChatTemplate
) -> dict[str, Any]:
    """`kwargs` (vLLM's, for one request) with the effort vLLM put there mapped onto the template's controls by
    `hook.prerender`: the other kwargs pass through and win over the intent, as in any chatcaps render; an
    `enable_thinking` vLLM derived from the effort is dropped, one the request set is kept. Unchanged where there is
    no effort, or one chatcaps has no intent for ("max")."""
    effort = kwargs.get("reasoning_effort")
    if effort not in hook.EFFORT_INTENTS:
        return dict(kwargs)
    derived = kwargs.get("enable_thinking") == (effort != "none")
    given = {
        key: value
        for key, value in kwargs.items()
        if key not in STANDARD_VARIABLES and key != "reasoning_effort" and not (key == "enable_thinking" and derived)
    }
    body = {"messages": list(messages), "reasoning_effort": effort, "chat_template_kwargs": given}
    _, result = hook.prerender(body, template)
    planned = {key: value for key, value in result.template_kwargs.items() if key not in STANDARD_VARIABLES}
    kept = {key: value for key, value in kwargs.items() if key not in VLLM_ADDS}
    return {**kept, **planned}


class ChatcapsRenderer(HfRenderer):  # type: ignore[misc,unused-ignore]
    """vLLM's Hugging Face renderer, each request's template kwargs planned by chatcaps (`template_kwargs`)."""

    def _planned(self, messages: Sequence[Mapping[str, Any]], params: Any) -> Any:
        try:
            kwargs = template_kwargs(messages, params.chat_template_kwargs, template_of(self.get_tokenizer()))
        except ChatcapsError as error:  # input chatcaps does not take (a content part it does not know): vLLM's
            logger.warning("chatcaps: reasoning effort left as vLLM passes it: %s", error)
            return params
        return replace(params, chat_template_kwargs=kwargs)

    def render_messages(self, messages: list[Any], params: Any) -> Any:
        return super().render_messages(messages, self._planned(messages, params))

    async def render_messages_async(self, messages: list[Any], params: Any) -> Any:
        return await super().render_messages_async(messages, self._planned(messages, params))
