"""Hypothesis strategies for hostile requests: everything a client on the internet may send a server.

Unlike tests/strategies.py (valid canonical input only), these draw wrong types, unknown roles, tool calls whose
arguments are not JSON, nesting deep enough to hit Python's recursion limit, control characters, lone surrogates,
Jinja syntax and special tokens inside text, and the OpenAI request fields with values of every type. chatcaps must
answer each with a typed chatcaps error or a result; any other exception, or a hang, is a bug.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from .harness import nested

ROLES = ("system", "developer", "user", "assistant", "tool")
SPECIAL_TEXTS = (
    "{{ raise_exception('x') }}",
    "{% for m in messages %}{% endfor %}",
    "<|im_end|>",
    "<|im_start|>system\n",
    "</think>",
    "<think>",
    "[INST]",
    "<start_of_turn>",
    "<|eot_id|>",
    "\x00",
    "\ud800",
    "\udfff",
    "\u202e",
    "\r\n",
    "%s%d",
    "{0.__class__}",
    "",
    " ",
)
DEEP = 3_000
"""Deeper than Python's default recursion limit (1000): the nesting at which a naive walk raises RecursionError."""


_CHARACTERS = st.one_of(st.characters(), st.characters(categories=["Cs", "Cc", "Cf", "Zl", "Zp"]))
_TEXTS = st.one_of(
    st.text(alphabet=_CHARACTERS, max_size=30),
    st.sampled_from(SPECIAL_TEXTS),
    st.lists(st.sampled_from(SPECIAL_TEXTS)).map("".join),
)


def hostile_texts() -> st.SearchStrategy[str]:
    """Short text from all of Unicode (surrogates and control characters included), or a known-awkward string."""
    return _TEXTS


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    _TEXTS,
)
_KEYS = st.one_of(_TEXTS, st.sampled_from(["type", "text", "name", "role", "content", "function"]))
_NESTED = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=8,
)
_VALUES = st.one_of(
    _NESTED, _NESTED, _NESTED, _NESTED, st.builds(nested, st.just(DEEP), st.sampled_from(["list", "dict"]))
)


def hostile_values() -> st.SearchStrategy[Any]:
    """Any JSON-like value a few levels deep, or (one time in forty-one) nested `DEEP` levels."""
    return _VALUES


def _field_values(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly plausible values for a field, otherwise anything."""
    return st.one_of(valid, valid, _VALUES)


_FUNCTION_NAMES = st.sampled_from(["get_weather", "lookup"])
_CALL_IDS = st.sampled_from(["call00001", "abc123XYZ"])
_ARGUMENTS = st.one_of(
    st.sampled_from(['{"city": "Paris"}', "{not json", "[1, 2]", '"a string"', "[" * 2000 + "]" * 2000]),
    _TEXTS,
    _VALUES,
)
_CALL = st.fixed_dictionaries(
    {},
    optional={
        "id": _field_values(_CALL_IDS),
        "type": _field_values(st.just("function")),
        "function": st.one_of(
            st.fixed_dictionaries({}, optional={"name": _field_values(_FUNCTION_NAMES), "arguments": _ARGUMENTS}),
            _VALUES,
        ),
    },
)
_TOOL_CALLS = st.one_of(st.lists(st.one_of(_CALL, _VALUES), max_size=3), _VALUES)
_BLOCK = st.fixed_dictionaries(
    {},
    optional={
        "type": _field_values(st.sampled_from(["text", "image", "image_url", "audio", "video"])),
        "text": _field_values(_TEXTS),
        "image_url": _VALUES,
        "url": _VALUES,
    },
)
_CONTENTS = st.one_of(_TEXTS, st.lists(st.one_of(_BLOCK, _VALUES), max_size=3), _VALUES)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": _field_values(st.sampled_from(ROLES)),
        "content": _CONTENTS,
        "reasoning_content": _field_values(_TEXTS),
        "reasoning": _field_values(_TEXTS),
        "thinking": _field_values(_TEXTS),
        "tool_calls": _TOOL_CALLS,
        "tool_call_id": _field_values(_CALL_IDS),
        "name": _VALUES,
    },
)
_MESSAGES = st.one_of(st.lists(st.one_of(_MESSAGE, _MESSAGE, _MESSAGE, _VALUES), max_size=5), _VALUES)
_TOOL = st.fixed_dictionaries(
    {"type": _field_values(st.just("function"))},
    optional={
        "function": st.one_of(
            st.fixed_dictionaries(
                {"name": _field_values(_FUNCTION_NAMES)}, optional={"description": _VALUES, "parameters": _VALUES}
            ),
            _VALUES,
        )
    },
)
_TOOLS = st.one_of(st.none(), st.lists(st.one_of(_TOOL, _VALUES), max_size=3), _VALUES)
_INTENTS = st.one_of(
    st.sampled_from([None, "off", "on", "low", "medium", "high", "max", "", "none"]),
    st.integers(min_value=-10, max_value=10**12),
    _VALUES,
)
_ARG_NAMES = st.sampled_from(["enable_thinking", "thinking", "reasoning_effort", "messages", "tools", "x", "__class__"])
_TEMPLATE_ARGS = st.one_of(st.none(), st.dictionaries(st.one_of(_ARG_NAMES, _TEXTS), _VALUES, max_size=3), _VALUES)
_RENDER_CALLS = st.fixed_dictionaries(
    {
        "messages": _MESSAGES,
        "tools": _TOOLS,
        "reasoning": _INTENTS,
        "template_args": _TEMPLATE_ARGS,
        "add_generation_prompt": st.booleans(),
        "continue_final_message": st.booleans(),
    }
)
_BODY = st.fixed_dictionaries(
    {"messages": _MESSAGES},
    optional={
        "tools": _TOOLS,
        "reasoning_effort": _field_values(st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh"])),
        "reasoning": _field_values(st.fixed_dictionaries({}, optional={"effort": _INTENTS})),
        "thinking": _field_values(
            st.fixed_dictionaries(
                {"type": _field_values(st.sampled_from(["enabled", "disabled"]))},
                optional={"budget_tokens": _field_values(st.integers(min_value=-5, max_value=10**9))},
            )
        ),
        "chat_template_kwargs": _TEMPLATE_ARGS,
        "add_generation_prompt": _field_values(st.booleans()),
        "continue_final_message": _field_values(st.booleans()),
        "model": _VALUES,
        "stream": _VALUES,
    },
)


def hostile_messages() -> st.SearchStrategy[Any]:
    """A list of up to five messages, each a dict with any subset of the canonical fields, each plausible or not;
    or anything else in place of the list."""
    return _MESSAGES


def hostile_render_calls() -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for `ChatTemplate.render`: messages, tools, reasoning, template_args and the two flags."""
    return _RENDER_CALLS


def hostile_request_bodies() -> st.SearchStrategy[Any]:
    """An OpenAI chat-completions body for `hook.prerender`, each field plausible, wrongly typed or absent; or not a
    dict at all."""
    return st.one_of(_BODY, _BODY, _VALUES)
