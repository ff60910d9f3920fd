"""Tool support: definitions, calls (and the argument shapes that render correctly), parallel calls, results, ids."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

from chatcaps.caps import ArgumentShape, Tools
from chatcaps.probes.prober import Conversation, Prober, as_role, conversation, probe_tools
from chatcaps.probes.text import shows

Shape = Literal["object", "string"]


def with_arguments(messages: Conversation, shape: Shape) -> Conversation:
    """The conversation with every tool call's arguments as a JSON object or as a JSON string."""
    for message in messages:
        for call in message.get("tool_calls", ()):
            arguments = call["function"]["arguments"]
            if shape == "string" and not isinstance(arguments, str):
                call["function"]["arguments"] = json.dumps(arguments)
    return messages


def with_call_id(messages: Conversation, call_id: str) -> Conversation:
    """The conversation with its one call id (on the call and on its result) replaced."""
    for message in messages:
        for call in message.get("tool_calls", ()):
            call["id"] = call_id
        if message.get("role") == "tool":
            message["tool_call_id"] = call_id
    return messages


LONG_CALL_ID = "call_Zq7a1b2c3d4e5f6g7h8i9j"
"""An id as OpenAI writes them; the probe conversations' own ids are 9 characters, which every template accepts."""


def arguments_render(output: str | None, *pairs: tuple[str, str]) -> bool:
    """Each argument's key and value appear, and not as an escaped JSON string or a Python dict repr.

    A quoted value alone is no repr: pythonic call syntax (`f(key='value')`) is a native format of some models."""
    if output is None:
        return False
    for key, value in pairs:
        if key not in output or value not in output:
            return False
        if f'\\"{value}' in output or f"'{key}': '{value}'" in output:
            return False
    return True


ESCAPED_QUOTES = ("&#34;", "&quot;", "&#39;")


def _unescaped(correct: list[Shape], outputs: Mapping[Shape, str | None]) -> list[Shape]:
    """The shapes whose render writes the call as the model writes it: where one shape's render HTML-escapes quotes
    and another's does not, the escaped one is wrong. mistral-common's v3/v7 templates concatenate
    `arguments|tojson|safe` (a Markup) with plain strings, which escapes the rest of an object's call
    (`{&#34;name&#34;: ...`), while string arguments concatenate as plain text."""
    clean = [shape for shape in correct if not any(quote in (outputs[shape] or "") for quote in ESCAPED_QUOTES)]
    return clean or correct


NULL_CONTENT: Mapping[str, str | None] = MappingProxyType({"content": None})
CALL_CONTENT_SHAPES: tuple[tuple[str, Mapping[str, str | None]], ...] = (
    ("empty content", {"content": ""}),
    ("text content", {"content": "Zq7Answer0"}),
    ("no content", {}),
    ("null content", NULL_CONTENT),
)
"""The content of an assistant tool-call turn, as the probes try it: a template may index into an empty string,
require text, or write calls only where `content` is None (`message['content'] is none`); refusing one shape says
nothing about tool calls."""


def with_call_content(messages: Conversation, content: Mapping[str, str | None]) -> Conversation:
    """The conversation with every tool-call turn's content as `content` says (empty: the key left out)."""
    for message in messages:
        if message.get("tool_calls"):
            message.pop("content", None)
            message.update(content)
    return messages


def detect_tools(prober: Prober) -> Tools:
    tools = probe_tools()
    definitions = prober.render("tools.definitions", conversation("user"), tools=tools, add_generation_prompt=True)
    outputs: dict[Shape, str | None] = {}
    content: dict[Shape, Mapping[str, str | None]] = {}
    listed: list[dict[str, Any]] | None = tools
    """The tools the call probes pass: none where the definitions raise and the calls render only without them."""
    arguments: Shape
    for arguments in ("object", "string"):
        variants = [
            (name, with_call_content(with_arguments(conversation("tool_call"), arguments), value))
            for name, value in CALL_CONTENT_SHAPES
        ]
        index, outputs[arguments] = prober.render_shapes(
            f"tools.calls.{arguments}", variants, tools=tools, add_generation_prompt=True
        )
        if index < 0 and definitions is None:  # the tool definitions raise (recorded): the calls, without them
            index, outputs[arguments] = _without_tools(prober, f"tools.calls.{arguments}", variants)
            listed = None if index >= 0 else listed
        if index >= 0 and not shows(outputs[arguments], "zq7_weather"):  # rendered, but without the call
            index, outputs[arguments] = _showing_call(
                prober, f"tools.calls.{arguments}", variants, index, outputs[arguments], listed
            )
        content[arguments] = CALL_CONTENT_SHAPES[max(index, 0)][1]
    rendered = [shape for shape, output in outputs.items() if shows(output, "zq7_weather")]
    correct = _unescaped([shape for shape in rendered if arguments_render(outputs[shape], _ARG1)], outputs)
    shape = _shape(correct)
    parallel = None
    if correct:
        parallel = prober.render(
            "tools.parallel_calls",
            with_call_content(with_arguments(conversation("parallel_calls"), correct[0]), content[correct[0]]),
            tools=listed,
            add_generation_prompt=True,
        )
    any_output = " ".join(output for output in outputs.values() if output is not None)
    long_ids = None
    if correct:
        long_ids = prober.render(
            "tools.call_id_length",
            with_call_id(
                with_call_content(with_arguments(conversation("tool_call"), correct[0]), content[correct[0]]),
                LONG_CALL_ID,
            ),
            tools=listed,
            add_generation_prompt=True,
        )
    responses = "Zq7Result1" in any_output and _own_results(
        prober, correct[0] if correct else "object", content, listed
    )
    return Tools(
        definitions=shows(definitions, "zq7_weather", "Zq7ToolDesc1"),
        calls=bool(correct),
        parallel_calls=shows(parallel, "zq7_weather", "zq7_clock") and arguments_render(parallel, _ARG1, _ARG2),
        responses=responses,
        call_id="Zq7Call01" in any_output,
        arguments=shape,
        short_call_ids=bool(correct) and long_ids is None,
        calls_need_null_content=bool(correct) and content[correct[0]] == NULL_CONTENT,
    )


def _own_results(
    prober: Prober, shape: Shape, content: Mapping[Shape, Mapping[str, str | None]], listed: list[dict[str, Any]] | None
) -> bool:
    """The tool result renders otherwise than an assistant turn of the same text would (a template whose `else`
    branch writes every other role as the assistant's shows the result as the model's own answer)."""
    messages = with_call_content(with_arguments(conversation("tool_call"), shape), content[shape])
    output = prober.render("tools.responses", messages, tools=listed, add_generation_prompt=True)
    swapped = prober.attempt(
        "tools.responses", as_role(messages, "tool", "assistant"), tools=listed, add_generation_prompt=True
    )
    return output is not None and swapped.output != output


def _without_tools(prober: Prober, probe: str, variants: list[tuple[str, Conversation]]) -> tuple[int, str | None]:
    """The first shape that renders with no tools passed, as (its index, its output), or (-1, None); recording
    nothing more than the refusal with the tools already says."""
    for at, (_, messages) in enumerate(variants):
        found = prober.attempt(probe, messages, add_generation_prompt=True)
        if found.output is not None:
            return at, found.output
    return -1, None


def _showing_call(
    prober: Prober,
    probe: str,
    variants: list[tuple[str, Conversation]],
    index: int,
    output: str | None,
    tools: list[dict[str, Any]] | None,
) -> tuple[int, str | None]:
    """The shape after `index` with content None, where its render shows the call, as (its index, its output); else
    `index` and `output`: a template that writes calls only where content is None (`message['content'] is none`)
    renders the other shapes without them, and only that shape can show them."""
    for at in range(index + 1, len(variants)):
        if CALL_CONTENT_SHAPES[at][1] != NULL_CONTENT:
            continue
        found = prober.preview(probe, variants[at][1], tools=tools, add_generation_prompt=True)
        if shows(found.output, "zq7_weather"):
            return at, found.output
    return index, output


_ARG1 = ("zq7_city", "Zq7Arg1")
_ARG2 = ("zq7_zone", "Zq7Arg2")


def _shape(correct: list[Shape]) -> ArgumentShape | None:
    if len(correct) == 2:
        return "both"
    return correct[0] if correct else None


def tool_call_shape(caps_tools: Tools) -> Shape:
    """The argument shape to use in other probes: the one this template renders (object when both or neither do)."""
    return "string" if caps_tools.arguments == "string" else "object"
