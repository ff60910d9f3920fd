"""The template's own call format as a vLLM structural tag: what keeps a model to `tool_choice` inside vLLM.

vLLM constrains tool calls with xgrammar structural tags, which its own parsers build by hand per model family
(`vllm.tool_parsers.structural_tag_registry`). chatcaps builds one from `Caps.tools.call_format`, the same format
`chatcaps.reply.constraint` writes GBNF from for llama-server: each declared tool is a tag (the call's text up to the
arguments, with the name; the arguments by the tool's JSON schema; the call's text after them), inside the turn's
opener and closer where it has them, joined by its separator.

- `"required"`: at least one call, from the first token (one with `parallel_tool_calls: false`, or where the template
  writes one call a turn); a named function: that tool only, once.
- `"auto"`: free text until the model writes the trigger (the first word of the opener, or of a call's text before
  its name), then calls.
- `"none"`: free text that never holds the trigger.

Formats whose arguments are not one JSON object (XML-like parameters, pythonic calls), or whose call text does not
put the name before the arguments and end after them, get no tag: the request is read as before, unconstrained.
The reasoning before the answer is vLLM's to leave free: its engine starts a structured output after the reasoning
parser says the reasoning ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xgrammar.structural_tag import (  # type: ignore[import-not-found,unused-ignore]
    AnyTextFormat,
    ConstStringFormat,
    JSONSchemaFormat,
    SequenceFormat,
    StructuralTag,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
)

from chatcaps.caps import CallFormat, Caps

__all__ = ["structural_tag"]

LAYOUT = 8
"""The most whitespace between two JSON tokens of the arguments, as the GBNF bounds the layout between the parts of
a call (`reply.constraint`): unbounded, a model that likes newlines writes them until its tokens run out."""


def structural_tag(caps: Caps, tools: Sequence[Mapping[str, Any]], tool_choice: Any, *, parallel: bool = True) -> Any:
    """The xgrammar `StructuralTag` that keeps a reply to `tool_choice` (OpenAI's: "auto", "required", "none" or a
    named function) in the template's call format, or None where the format or the request gives none."""
    calls = caps.tools.call_format
    functions = [tool["function"] for tool in tools if tool.get("type", "function") == "function"]
    if calls is None or not functions or not _fits(calls):
        return None
    head, _, tail = calls.call.partition("${arguments}")
    # The layout a call starts with: written after the opener and the separator, not before the first call.
    lead = head[: len(head) - len(head.lstrip())]
    opener = calls.begin.lstrip() if calls.begin.endswith(lead) else calls.begin.lstrip() + lead
    opener, closer = opener if calls.begin.strip() else "", calls.end.rstrip()
    # The first word of what opens the calls (`<tool_call>`): free text never holds it where calls are not allowed,
    # and it starts the calls where they may come.
    written = (opener or head.partition("${name}")[0]).split(maxsplit=1)
    trigger = written[0] if written else ""
    if tool_choice == "none":
        return StructuralTag(format=AnyTextFormat(excludes=[trigger])) if trigger else None
    if isinstance(tool_choice, Mapping):
        name = (tool_choice.get("function") or {}).get("name")
        functions = [function for function in functions if function["name"] == name]
        if not functions:
            return None
    single = not parallel or calls.separator is None or isinstance(tool_choice, Mapping)
    tags = [
        TagFormat(
            begin=head.lstrip().replace("${name}", function["name"]),
            content=JSONSchemaFormat(
                json_schema=function.get("parameters") or {"type": "object"}, max_whitespace_cnt=LAYOUT
            ),
            end=tail,
        )
        for function in functions
    ]
    listed = TagsWithSeparatorFormat(
        tags=tags, separator=(calls.separator or "") + lead, at_least_one=True, stop_after_first=single
    )
    if tool_choice == "auto":
        if not trigger:
            return None
        if not opener:
            return StructuralTag(format=TriggeredTagsFormat(triggers=[trigger], tags=tags, stop_after_first=single))
        turn = TagFormat(begin=opener, content=listed, end=closer)
        return StructuralTag(format=TriggeredTagsFormat(triggers=[trigger], tags=[turn], stop_after_first=True))
    if tool_choice != "required" and not isinstance(tool_choice, Mapping):
        return None
    parts = [*([ConstStringFormat(value=opener)] if opener else []), listed]
    parts += [ConstStringFormat(value=closer)] if closer else []
    return StructuralTag(format=parts[0] if len(parts) == 1 else SequenceFormat(elements=parts))


def _fits(calls: CallFormat) -> bool:
    """Whether a call is one tag: JSON arguments after the name, closed by text of the call's own, and no other
    placeholder (an id or a counter would need a pattern, not a literal)."""
    head, found, tail = calls.call.partition("${arguments}")
    return (
        calls.arguments == "json"
        and bool(found)
        and head.count("${name}") == 1
        and head.count("${") == 1
        and "${" not in tail
        and bool(tail.strip())
    )
