"""Hypothesis strategies for valid canonical chat requests (docs/polyfills.md).

Property tests render these through every zoo template: any input drawn here is one a user may send, so a render
that raises is a chatcaps bug, not bad input. Examples stay small (at most 8 messages, texts up to 40 characters)
because each one is rendered by some 200 templates.

Import from a test module as `from strategies import conversations` (pytest puts `tests/` on `sys.path`).
"""

from __future__ import annotations

import json
import string
from typing import Any

from hypothesis import strategies as st

MAX_MESSAGES = 8
MAX_TEXT = 40
MAX_CALLS = 3
TOOL_CALL_ID_LENGTH = 9  # Mistral templates raise unless ids are exactly 9 alphanumerics
TOOL_NAME_PATTERN = r"[a-z][a-z_]{2,12}"
IMAGE_URLS = ("https://example.com/x.png", "https://example.com/y.png")
REASONING_TIERS = ("off", "on", "low", "medium", "high")
MAX_BUDGET = 100_000

# `<`, `>`, `{`, `}` and quotes catch escaping bugs; `|` and `[` are left out so no text can spell a special token
# (`<|im_end|>`, `[INST]`). The forbidden substrings are Jinja syntax and the reasoning markers probes look for.
TEXT_ALPHABET = string.ascii_letters + string.digits + " \n.,!?'\"-:/<>{}&" + "é中😀"
FORBIDDEN_SUBSTRINGS = ("{{", "{%", "<think>", "</think>")

_ID_ALPHABET = string.ascii_letters + string.digits


def _is_valid_text(text: str) -> bool:
    return bool(text.strip()) and not any(marker in text for marker in FORBIDDEN_SUBSTRINGS)


def texts() -> st.SearchStrategy[str]:
    """Short non-blank text from a small alphabet with letters, digits, punctuation, newlines, é, 中 and an emoji."""
    return st.text(alphabet=TEXT_ALPHABET, min_size=1, max_size=MAX_TEXT).filter(_is_valid_text)


def tool_names() -> st.SearchStrategy[str]:
    """A function name matching `[a-z][a-z_]{2,12}`."""
    return st.from_regex(TOOL_NAME_PATTERN, fullmatch=True)


def tool_call_ids() -> st.SearchStrategy[str]:
    """A tool call id of exactly 9 ASCII letters and digits."""
    return st.text(alphabet=_ID_ALPHABET, min_size=TOOL_CALL_ID_LENGTH, max_size=TOOL_CALL_ID_LENGTH)


def reasoning_intents() -> st.SearchStrategy[str | int | None]:
    """The `reasoning` argument: None, a tier name, or a token budget in 0..100000."""
    return st.one_of(st.none(), st.sampled_from(REASONING_TIERS), st.integers(min_value=0, max_value=MAX_BUDGET))


@st.composite
def tool_definitions(draw: st.DrawFn, name: str | None = None) -> dict[str, Any]:
    """One OpenAI function tool with one or two string parameters, named `name` or a drawn name."""
    properties = draw(
        st.lists(st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True), min_size=1, max_size=2, unique=True)
    )
    schema: dict[str, Any] = {}
    for prop in properties:
        schema[prop] = {"type": "string", "description": draw(texts())} if draw(st.booleans()) else {"type": "string"}
    required = [prop for prop in properties if draw(st.booleans())]
    return {
        "type": "function",
        "function": {
            "name": draw(tool_names()) if name is None else name,
            "description": draw(texts()),
            "parameters": {"type": "object", "properties": schema, "required": required},
        },
    }


@st.composite
def tool_lists(draw: st.DrawFn) -> list[dict[str, Any]] | None:
    """The `tools` argument: None, an empty list, or one to three tools with distinct names."""
    if draw(st.booleans()):
        return draw(st.sampled_from([None, []]))
    names = draw(st.lists(tool_names(), min_size=1, max_size=3, unique=True))
    return [draw(tool_definitions(name)) for name in names]


def _text_block() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda text: {"type": "text", "text": text}, texts())


def _image_block() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda url: {"type": "image", "url": url}, st.sampled_from(IMAGE_URLS)),
        st.builds(lambda url: {"type": "image_url", "image_url": {"url": url}}, st.sampled_from(IMAGE_URLS)),
    )


def text_contents() -> st.SearchStrategy[str | list[dict[str, Any]]]:
    """Content without media: a string or one or two text blocks."""
    return st.one_of(texts(), st.lists(_text_block(), min_size=1, max_size=2))


@st.composite
def _blocks_with_text(draw: st.DrawFn) -> list[dict[str, Any]]:
    blocks = draw(st.lists(_text_block(), min_size=1, max_size=2)) + draw(st.lists(_image_block(), max_size=2))
    return list(draw(st.permutations(blocks)))


def user_contents() -> st.SearchStrategy[str | list[dict[str, Any]]]:
    """User content: a string, or up to four blocks (text, `image`, `image_url`) with at least one text block."""
    return st.one_of(texts(), _blocks_with_text())


@st.composite
def _assistant_message(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": draw(text_contents())}
    if draw(st.booleans()):
        message["reasoning_content"] = draw(texts())
    return message


@st.composite
def _tool_call_turn(
    draw: st.DrawFn, tools: list[dict[str, Any]], calls: int, used_ids: set[str]
) -> list[dict[str, Any]]:
    """An assistant turn with `calls` tool calls, then one tool result per call, in call order."""
    tool_calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for _ in range(calls):
        function = draw(st.sampled_from(tools))["function"]
        call_id = draw(tool_call_ids().filter(lambda candidate: candidate not in used_ids))
        used_ids.add(call_id)
        arguments = {prop: draw(texts()) for prop in function["parameters"]["properties"]}
        encoded = draw(st.sampled_from([json.dumps(arguments, ensure_ascii=False), arguments]))
        tool_calls.append(
            {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": encoded}}
        )
        results.append({"role": "tool", "tool_call_id": call_id, "name": function["name"], "content": draw(texts())})
    assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    if draw(st.booleans()):
        assistant["reasoning_content"] = draw(texts())
    return [assistant, *results]


# What may follow each role, and how often: repeats weight the draw. Consecutive user turns are valid (the renderer
# merges them) but kept rare; an inline system message always comes with the user turn after it.
_FOLLOWERS: dict[str, tuple[str, ...]] = {
    "user": ("assistant",) * 3 + ("tool_call",) * 2 + ("user",),
    "assistant": ("user",) * 3 + ("system",),
    "tool": ("assistant",) * 3 + ("tool_call",) * 2 + ("user",) * 2 + ("system",),
}
_PAIRED_KINDS = ("tool_call", "system")  # each adds at least two messages


def _next_kinds(previous_role: str, room: int, can_call_tools: bool) -> list[str]:
    """The kinds of turn that may follow `previous_role` when `room` more messages fit."""
    return [
        kind
        for kind in _FOLLOWERS[previous_role]
        if (kind != "tool_call" or can_call_tools) and (kind not in _PAIRED_KINDS or room >= 2)
    ]


@st.composite
def conversations(draw: st.DrawFn) -> dict[str, Any]:
    """A valid canonical request: `messages`, `tools`, `reasoning`, `add_generation_prompt`, `continue_final_message`.

    Messages: an optional system or developer message first, then a user turn, then up to 8 messages in all of
    assistant replies (string or text-block content, optional `reasoning_content`), tool-call turns each followed by
    one tool result per call, further user turns (rarely two in a row), and inline system messages, each followed by
    a user turn. The conversation ends on a user, tool or assistant message.
    """
    tools = draw(tool_lists())
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text_contents())})
    messages.append({"role": "user", "content": draw(user_contents())})
    target = draw(st.integers(min_value=len(messages), max_value=MAX_MESSAGES))
    used_ids: set[str] = set()
    while len(messages) < target:
        room = MAX_MESSAGES - len(messages)
        kind = draw(st.sampled_from(_next_kinds(messages[-1]["role"], room, bool(tools))))
        if kind == "assistant":
            messages.append(draw(_assistant_message()))
        elif kind == "tool_call":
            assert tools  # _next_kinds offers tool calls only when there are tools
            calls = draw(st.integers(min_value=1, max_value=min(MAX_CALLS, room - 1)))
            messages += draw(_tool_call_turn(tools, calls, used_ids))
        else:
            if kind == "system":
                messages.append({"role": "system", "content": draw(text_contents())})
            messages.append({"role": "user", "content": draw(user_contents())})

    last = messages[-1]
    can_continue = last["role"] == "assistant" and isinstance(last["content"], str) and "tool_calls" not in last
    continue_final_message = can_continue and draw(st.booleans())
    return {
        "messages": messages,
        "tools": tools,
        "reasoning": draw(reasoning_intents()),
        "add_generation_prompt": not continue_final_message and draw(st.booleans()),
        "continue_final_message": continue_final_message,
    }


_KEYWORD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "type": st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object", "nope", 3])
    | st.lists(st.sampled_from(["string", "integer", "null", "object"]), max_size=3),
    "enum": st.lists(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4)), max_size=3),
    "const": st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3)),
    "minimum": st.one_of(st.integers(-20, 20), st.floats(-5, 5), st.just("x")),
    "maximum": st.one_of(st.integers(-20, 20), st.floats(-5, 5)),
    "exclusiveMinimum": st.one_of(st.integers(-3, 3), st.booleans()),
    "exclusiveMaximum": st.one_of(st.integers(-3, 3), st.booleans()),
    "minLength": st.integers(-1, 4),
    "maxLength": st.integers(0, 300),
    "minItems": st.integers(0, 3),
    "maxItems": st.integers(0, 3),
    "pattern": st.sampled_from(["^a+$", "[0-9]{2}", "(?=x)", "a|b", '[^"]*', "\\d+\\.\\d", "(", "\\p{L}", "^$"]),
    "format": st.sampled_from(["date", "time", "date-time", "uuid", "ipv4", "email", "uri"]),
    "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2),
    "additionalProperties": st.booleans(),
    "$ref": st.sampled_from(["#", "#/$defs/d", "#/$defs/missing", "#/properties/a", "http://x/y.json", "d"]),
    "nullable": st.booleans(),
    "uniqueItems": st.booleans(),
    "multipleOf": st.integers(1, 3),
    "description": st.text(max_size=5),
    "$schema": st.just("https://json-schema.org/draft/2020-12/schema"),
}


def json_schemas(depth: int = 3) -> st.SearchStrategy[Any]:
    """JSON Schemas of any shape a client might send, well-formed or not: keywords with values of the right kind
    and of the wrong one, nested through properties, items, unions, `allOf`, `not` and `$defs`."""
    leaf = st.fixed_dictionaries({}, optional=_KEYWORD_VALUES) | st.booleans()

    def nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.fixed_dictionaries(
            {},
            optional={
                **_KEYWORD_VALUES,
                "properties": st.dictionaries(st.sampled_from(["a", "b", "c", 'q"t', ""]), inner, max_size=3),
                "items": inner,
                "prefixItems": st.lists(inner, max_size=2),
                "anyOf": st.lists(inner, max_size=3),
                "oneOf": st.lists(inner, max_size=2),
                "allOf": st.lists(inner, max_size=2),
                "not": inner,
                "$defs": st.fixed_dictionaries({"d": inner}),
            },
        )

    return st.recursive(leaf, nested, max_leaves=depth * 4)
