"""Rendering a conversation the way transformers does, on any engine.

`render_conversation` prepares the template's inputs exactly as
`transformers.utils.chat_template_utils.render_jinja_template` (transformers 5.x) does — plain JSON data only,
reasoning copied between `reasoning_content` and `thinking`, `tools=None` / `documents=None` passed when absent, the
`continue_final_message` tag and trim — so that on the jinja2 engine the output is byte-identical to transformers'.
Where transformers raises `ValueError`/`TypeError` on the input, this raises `InputError` with the same text.
"""

from __future__ import annotations

import dataclasses
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from chatcaps.engines.base import Renderer
from chatcaps.errors import InputError
from chatcaps.vocab import CONVERSATION_VARIABLES, REASONING_CONTENT, REASONING_KEYS, TRANSFORMERS_REASONING_ORDER

_LEAVES = frozenset({str, int, float, bool, type(None)})
_USUAL_DEPTH = 100
"""Nesting `plain_data` copies without a look at the stack: far more than messages, tools or arguments have."""
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def plain_data(value: Any) -> Any:
    """Rebuild `value` from plain JSON types; anything else becomes an inert "<TypeName>" placeholder.

    Templates are untrusted: the objects they see must carry no methods beyond those of str, int, float, list, dict.
    Input nested deeper than Python's recursion limit allows is refused with `InputError` (transformers raises
    RecursionError there).
    """
    try:
        return _plain(value, _USUAL_DEPTH)
    except RecursionError:
        return _plain_deep(value)


def _plain_deep(value: Any) -> Any:
    """`plain_data` of a value nested deeper than any real conversation: allowed as deep as a walk of two frames a
    level could go from here, so that what walks the copy again later (the JSON encoder, the template) has room to
    as well."""
    room = sys.getrecursionlimit() - sum(1 for _ in traceback.walk_stack(None))
    try:
        return _plain(value, room // 2)
    except RecursionError:
        raise InputError(
            "the input is nested too deeply to render (a list or dict inside another, deeper than Python's "
            f"recursion limit of {sys.getrecursionlimit()} allows)"
        ) from None


def _plain(value: Any, depth: int) -> Any:
    """Same rules, in the same order, as transformers' `_plain_template_data`; RecursionError once containers are
    nested more than `depth` deep."""
    kind = type(value)
    # The common cases first, by exact type (isinstance against ABCs is slow), leaves copied without a call, and in
    # loops rather than comprehensions (a comprehension is a second frame per level on Python 3.11).
    if kind is dict:
        if not depth:
            raise RecursionError
        inner = depth - 1
        copy = {}
        for key, item in value.items():
            if type(key) is not str:
                key = _plain(key, inner)
            copy[key] = item if type(item) in _LEAVES else _plain(item, inner)
        return copy
    if kind is list:
        if not depth:
            raise RecursionError
        inner = depth - 1
        items = []
        for item in value:
            items.append(item if type(item) in _LEAVES else _plain(item, inner))
        return items
    if kind in _LEAVES:
        return value
    return _plain_other(value, depth)


def _plain_other(value: Any, depth: int) -> Any:
    """`_plain` of anything but a plain dict, list or leaf. Apart, as its comprehensions would make `_plain`'s
    variables closure cells, which cost every call."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        inner = _deeper(depth)
        return {_plain(key, inner): _plain(item, inner) for key, item in value.items()}
    if isinstance(value, list):
        inner = _deeper(depth)
        return [_plain(item, inner) for item in value]
    if isinstance(value, tuple):
        inner = _deeper(depth)
        return tuple(_plain(item, inner) for item in value)
    numpy = sys.modules.get("numpy")  # only a numpy scalar can be one, and then numpy is imported already
    if numpy is not None and isinstance(value, numpy.generic):
        return _plain(value.item(), depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = _deeper(depth)
        return {field.name: _plain(getattr(value, field.name), inner) for field in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump(), depth)
    return f"<{type(value).__name__}>"


def _deeper(depth: int) -> int:
    """The depth left inside a container entered with `depth` left; none left is too deep (the dict and list cases
    above do the same inline)."""
    if not depth:
        raise RecursionError
    return depth - 1


def alias_reasoning(messages: Sequence[Any]) -> list[Any]:
    """Fill `reasoning_content` and `thinking` from whichever reasoning field is set, as transformers does."""
    aliased = []
    for message in messages:
        # Most messages carry none of the fields: one look at their keys tells so.
        if isinstance(message, dict) and not REASONING_KEYS.isdisjoint(message):
            for key in TRANSFORMERS_REASONING_ORDER:
                reasoning = message.get(key)
                if reasoning is not None:
                    message = {"thinking": reasoning, **message, REASONING_CONTENT: reasoning}
                    break
        aliased.append(message)
    return aliased


def render_conversation(
    renderer: Renderer,
    messages: Sequence[Any],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    continue_final_message: bool | str = False,
    **kwargs: Any,
) -> str:
    """Render one conversation with transformers' input handling; see the module docstring."""
    if tools is not None:
        for index, tool in enumerate(tools):
            if type(tool) is not dict and not isinstance(tool, Mapping):  # the exact type first: isinstance is slower
                raise InputError(f"tools[{index}] must be a JSON-schema dict, got {type(tool).__name__}")
    if documents is not None:
        for document in documents:
            if type(document) is not dict and not isinstance(document, Mapping):
                raise InputError("Documents should be a list of dicts with 'title' and 'text' keys!")

    reserved = CONVERSATION_VARIABLES.intersection(kwargs)
    if reserved:
        raise InputError(f"template kwargs may not be named {sorted(reserved)}: they are set by the conversation")

    chat = plain_data(list(messages))
    for index, message in enumerate(chat):
        if not isinstance(message, dict):
            raise InputError(f"Chat messages should be dicts, but got {message!r}.", index=index)
    variables = {
        **plain_data(kwargs),
        "tools": plain_data(None if tools is None else list(tools)),
        "documents": plain_data(None if documents is None else list(documents)),
    }
    return render_checked(renderer, chat, variables, add_generation_prompt, continue_final_message)


def render_checked(
    renderer: Renderer,
    messages: Sequence[dict[str, Any]],
    variables: Mapping[str, Any],
    add_generation_prompt: bool,
    continue_final_message: bool | str,
) -> str:
    """`render_conversation` of input that is plain data and checked already (`ChatTemplate.render` checks it
    before its polyfills): messages that are dicts, and `variables` (tools, documents and kwargs) none of which is
    named like a conversation variable. What is left is transformers' reasoning aliases and continue tag."""
    chat = alias_reasoning(messages)
    final_text = ""
    if continue_final_message:
        final_text = _tag_final_message(chat, renderer.source, continue_final_message)
    rendered = renderer.render({**variables, "messages": chat, "add_generation_prompt": add_generation_prompt})
    if continue_final_message:
        rendered = _cut_at_tag(rendered, final_text)
    return rendered


def _tag_final_message(chat: list[dict[str, Any]], source: str, continue_final_message: bool | str) -> str:
    """Append transformers' continue tag to the final message's field(s); return the text being continued.

    The final message (and its blocks) is replaced in `chat` by a tagged copy: the message given, which a caller
    such as `ChatTemplate.render` may hand back in its result, keeps its text untagged."""
    if not chat:
        raise InputError("continue_final_message is set but the conversation is empty!")
    field = continue_final_message if isinstance(continue_final_message, str) else "content"
    final = chat[-1].get(field)
    if final is None:
        raise InputError(
            f'continue_final_message is set but the final message has no "{field}" to continue!',
            index=len(chat) - 1,
            field=field,
        )
    fields = [field]
    if field in REASONING_KEYS:
        fields = [name for name in TRANSFORMERS_REASONING_ORDER if chat[-1].get(name) == final]
    if not any(name in source for name in fields):
        raise InputError(
            f'continue_final_message is set to "{field}" but this is not an accepted field in the chat_template'
        )
    last = chat[-1] = dict(chat[-1])
    if isinstance(final, list | tuple):
        blocks = list(final)
        for position in reversed(range(len(blocks))):
            if "text" in blocks[position]:
                text = str(blocks[position]["text"])
                blocks[position] = {**blocks[position], "text": text + _CONTINUE_TAG}
                last[field] = type(final)(blocks)
                return text
        raise InputError(
            "continue_final_message is set but we could not find any text to continue in the final message!",
            index=len(chat) - 1,
            field=field,
        )
    for name in fields:
        last[name] = last[name] + _CONTINUE_TAG
    return str(final)


def _cut_at_tag(rendered: str, final_text: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final_text.strip() not in rendered or tag not in rendered:
        raise InputError(
            "continue_final_message is set but the final message does not appear in the chat after "
            "applying the chat template! This can happen if the chat template deletes portions of "
            "the final message. Please verify the chat template and final message in your chat to "
            "ensure they are compatible."
            f"Final message to continue: {final_text.strip()}\nRendered chat:\n{rendered}"
        )
    at = rendered.rindex(tag)
    if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return rendered[:at]
    return rendered[:at].rstrip()
