"""Content shapes: string, typed text blocks, non-null requirements, and the media block types that render."""

from __future__ import annotations

from typing import Any

from chatcaps.caps import Content
from chatcaps.probes.prober import Prober, conversation, probe_data, probe_tools
from chatcaps.probes.text import leaks, shows

REPR_FRAGMENTS = ("'type'", '"type"', "'text'", '"text"', "{'", '{"')
"""Pieces of a Python or JSON repr of a content block: a template printing the list itself, not its text."""


def detect_content(prober: Prober) -> Content:
    string_output = prober.render("content.string", conversation("user"), add_generation_prompt=True)
    typed_output = prober.render("content.typed", conversation("typed"), add_generation_prompt=True)
    string = shows(string_output, "Zq7User1")
    typed = shows(typed_output, "Zq7User1") and not leaks(typed_output, string_output, REPR_FRAGMENTS)
    return Content(
        string=string,
        typed=typed,
        requires_typed=typed and not string,
        typed_assistant=typed and _typed_assistant(prober),
        requires_non_null=_requires_non_null(prober),
        block_types=_block_types(prober, typed_output),
    )


def _typed_assistant(prober: Prober) -> bool:
    """A past assistant turn's text blocks render as its text, with no repr leaking that its string does not show."""
    messages = conversation("typed_assistant")
    typed = prober.render("content.typed_assistant", messages, add_generation_prompt=True)
    messages[1]["content"] = "Zq7Answer1"
    string = prober.render("content.typed_assistant", messages, add_generation_prompt=True)
    if string is None or not shows(string, "Zq7Answer1"):
        return True  # the template shows no past answer at all: nothing to tell apart
    return shows(typed, "Zq7Answer1") and not leaks(typed, string, REPR_FRAGMENTS)


def _requires_non_null(prober: Prober) -> bool:
    """Content None in a tool-call turn fails or prints "None" where content "" renders cleanly; the turn followed by
    a user turn instead of a tool result where the template refuses the tool turn (a role check that allows only
    user and assistant), so that an unrelated refusal is no "no"."""
    messages = conversation("tool_call")
    empty = prober.render("content.non_null", messages, tools=probe_tools(), add_generation_prompt=True)
    if empty is None:  # the refusal is recorded by the probes that met it first; a second one would say nothing new
        messages = [*messages[:2], {"role": "user", "content": "Zq7User2"}]
        empty = prober.attempt("content.non_null", messages, tools=probe_tools(), add_generation_prompt=True).output
    if empty is None:
        return False
    messages[1]["content"] = None
    null = prober.render("content.non_null", messages, tools=probe_tools(), add_generation_prompt=True)
    return null is None or null.count("None") > empty.count("None")


def _block_types(prober: Prober, text_only: str | None) -> tuple[str, ...]:
    """Block types whose presence changes the render, without the block's repr or URL leaking into it."""
    if text_only is None:
        return ()
    found = []
    blocks: dict[str, dict[str, Any]] = probe_data()["blocks"]
    for block_type, block in blocks.items():
        messages = conversation("typed")
        messages[0]["content"] = [block, *messages[0]["content"]]
        output = prober.render(f"content.{block_type}", messages, add_generation_prompt=True)
        if (
            output is not None
            and output != text_only
            and "Zq7User1" in output
            and block["url"] not in output
            and not leaks(output, text_only, REPR_FRAGMENTS)
        ):
            found.append(block_type)
    return tuple(found)
