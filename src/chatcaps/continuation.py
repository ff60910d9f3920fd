"""`continue_final_message`: rendering a prompt that continues the final message, and finding where the reply to it
is read from. `ChatTemplate.render` hands in its own render of the pipeline's output (`Render`) and its Caps.

The prompt continues the final message's reasoning where the message has reasoning and no content yet
(transformers' `continue_final_message="reasoning_content"`: cut right after the reasoning text, before the end
marker), else its content (`rendered`). The reply is read as what the prompt holds of the message followed by what
the model generates, after the generation prompt the conversation before the message gets (`read_from`, called once
a reply is read: `ReplyContext.continue_from`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from chatcaps.caps import Caps
from chatcaps.errors import ChatcapsError, InputError
from chatcaps.polyfills import Request
from chatcaps.reply.grammar import loaded
from chatcaps.vocab import REASONING_FIELDS, common_prefix_length

Render = Callable[[Request, dict[str, Any], bool, bool | str], str]
"""The template run on the pipeline's output: (request, kwargs, add_generation_prompt, continue_final_message)."""


def rendered(
    render: Render,
    caps: Caps,
    request: Request,
    kwargs: dict[str, Any],
    add_generation_prompt: bool,
    continue_final_message: bool,
) -> tuple[str, tuple[str, ...]]:
    """The template's render, with what `continue_final_message` continues: the final message's reasoning field
    where the message has reasoning and no content yet, else its content; and a note where the template does not
    show that reasoning where it can be continued (its content is continued then)."""
    if not continue_final_message or not request.messages:
        return render(request, kwargs, add_generation_prompt, continue_final_message), ()
    final = request.messages[-1]
    field = reasoning_field(final, caps)
    if field is not None and final.get("role") == "assistant" and not final.get("content"):
        try:
            return render(request, kwargs, add_generation_prompt, field), ()
        except InputError:
            note = f"the template does not show the final message's {field} where it can be continued: continued "
            note += "after it"
            return render(request, kwargs, add_generation_prompt, continue_final_message), (note,)
    return render(request, kwargs, add_generation_prompt, continue_final_message), ()


def check(request: Request, index: int) -> None:
    """Raise where the polyfills left the continued assistant message (`messages[index]`) out of the prompt (only
    reasoning, for a template that shows none): the prompt would continue the message before it."""
    if not request.messages or request.messages[-1].get("role") != "assistant":
        raise InputError(
            "continue_final_message: this assistant message is left out of the prompt (the template shows none"
            " of what it holds), so there is nothing to continue",
            index=index,
        )


def read_from(
    render: Render, caps: Caps, request: Request, kwargs: dict[str, Any], prompt: str, index: int
) -> tuple[str, str]:
    """Where the reply to `prompt`, a continued final message (`messages[index]`), is read from: the prompt to
    read after and what `prompt` holds of the message (`ReplyContext.continue_from`).

    The message is `prompt` past the generation prompt the conversation before it gets (`start`). Reading a
    reply from there works for any start anchor, a pattern included, which cannot keep text after the prompt's
    end. Where that render fails or is not a prefix of `prompt`, the reply is read from the prompt's last start
    anchor ("" held). Where none is past the text the two share, the template drops the message or writes it
    without the generation prompt's own text: a grammar that starts every message inside the reasoning block
    (the generation prompt opens it in words, Apriel's `Here are my reasoning steps:`) reads a message whose
    reasoning the template writes right after the header the two share as if it followed `start`
    (`_after_header`); else `InputError`: read on, the prompt before the message (the system prompt) would be
    the reply."""
    rest = replace(request, messages=request.messages[:-1])
    try:
        start = render(rest, kwargs, True, False)
    except ChatcapsError:
        return prompt, ""
    if start and prompt.startswith(start):
        return start, prompt[len(start) :]
    anchor = loaded(caps)
    literals = anchor.start_anchor_literals
    if literals is None:  # a pattern anchor finds any prompt
        return prompt, ""
    # Past the conversation before the message, without a generation prompt (whose own text may differ from the
    # message's header: `<assistant>\n</think>` against `<assistant>\n<think>\n...`); the header may begin inside
    # the text both share (`<|START_OF_TURN_TOKEN|>` before another role's token).
    try:
        before = render(rest, kwargs, False, False)
    except ChatcapsError:
        return prompt, ""
    shared = common_prefix_length(before, prompt)
    found = anchor.start_anchor_re.finditer(prompt, max(0, shared - max(map(len, literals))))
    if any(match.end() >= shared for match in found):
        return prompt, ""
    body = _after_header(caps, request.messages[-1], prompt, start, shared)
    if body is not None:
        return start, prompt[body:]
    header = " or ".join(map(repr, literals))
    raise InputError(
        f"continue_final_message: the prompt holds no {header} (where the reply grammar finds the assistant"
        " message) after the conversation before this message: the template drops it or writes it another way,"
        " so a reply cannot be read as its continuation",
        index=index,
    )


def _after_header(caps: Caps, final: Mapping[str, Any], prompt: str, start: str, shared: int) -> int | None:
    """Where `final`'s reasoning begins in `prompt`, if the template writes it first, right after text `prompt`
    shares with `start` (the header both begin the message with), and the grammar starts every message inside
    the reasoning block (no start marker): read after `start`, it then reads as the generation prompt would have
    it. The last such place past `shared` (the conversation before the message) that `start` also holds up to,
    so a reasoning that begins like the generation prompt's own text, or a piece of the header, is not cut.
    None where there is none."""
    reasoning = caps.reasoning
    field = reasoning_field(final, caps)
    text = final[field].strip() if field else ""
    if reasoning.start_marker or not reasoning.end_marker or not text:
        return None
    agreed = common_prefix_length(start, prompt)
    places = (at for at in range(shared, agreed + 1) if prompt.startswith(text, at))
    return max(places, default=None)


def reasoning_field(message: Mapping[str, Any], caps: Caps) -> str | None:
    """The field that holds `message`'s reasoning text after the polyfills (`thought` and the like included); None
    where it has none."""
    fields = (*REASONING_FIELDS, caps.reasoning.format)
    return next((name for name in fields if isinstance(message.get(name), str) and message[name]), None)
