"""`ChatTemplate.render` on small templates, one per mechanism (tests/data/probe_templates.json): the intent
mapping, each polyfill's record, and bad input as typed errors naming the message and field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatcaps import ChatTemplate, InputError
from chatcaps.intent import tier_of_budget
from chatcaps.polyfills.tools import INSTRUCTIONS, call_text, describe_tools

TEMPLATES: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "probe_templates.json").read_text("utf-8"))
USER = [{"role": "user", "content": "Hi"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


def template(name: str) -> ChatTemplate:
    return ChatTemplate(TEMPLATES[name]["template"])


@pytest.mark.parametrize(
    ("budget", "tier"), [(0, "low"), (2048, "low"), (2049, "medium"), (8192, "medium"), (8193, "high"), (10**6, "high")]
)
def test_a_budget_rounds_up_to_a_tier(budget: int, tier: str) -> None:
    assert tier_of_budget(budget) == tier


def test_off_and_on_use_a_boolean_toggle() -> None:
    chat = template("reasoning_field_toggle")
    off = chat.render(USER, reasoning="off")
    assert off.prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert off.reasoning.to_dict() == {
        "intent": "off",
        "mechanism": "kwarg",
        "emitted": {"enable_thinking": False},
        "exact": True,
        "note": "",
    }
    assert chat.render(USER, reasoning="on").reasoning.emitted == {"enable_thinking": True}


def test_levels_map_onto_effort_values_and_budgets_onto_the_nearest_tier() -> None:
    chat = template("effort_enum")
    assert chat.render(USER, reasoning="high").prompt.startswith("<|system|>Reasoning: high\n")
    budget = chat.render(USER, reasoning=3000)
    assert (budget.reasoning.emitted, budget.reasoning.exact) == ({"reasoning_effort": "medium"}, False)
    assert budget.reasoning.note == "budget 3000 -> medium"
    off = chat.render(USER, reasoning="off").reasoning
    assert (off.emitted, off.exact, off.note) == (
        {"reasoning_effort": "low"},
        False,
        "no off switch; the lowest effort level 'low' instead",
    )


def test_on_without_a_toggle_uses_an_effort_or_budget_control_before_any_prefill() -> None:
    """Effort: the default where it reasons; budget: the default where it reasons, else the medium tier's budget."""
    effort = template("effort_enum").render(USER, reasoning="on")
    assert (effort.reasoning.mechanism, effort.reasoning.emitted, effort.reasoning.exact) == (
        "kwarg",
        {"reasoning_effort": "medium"},
        True,
    )
    budget = template("budget_and_history_switch").render(USER, reasoning="on")
    assert budget.prompt == "<user>Hi\n<budget>8192</budget><assistant>"
    assert (budget.reasoning.emitted, budget.reasoning.exact) == ({"thinking_budget": 8192}, True)


def test_an_effort_level_behind_a_switch_turns_the_switch_on_too() -> None:
    result = template("effort_behind_switch").render(USER, reasoning="high")
    assert result.reasoning.emitted == {"reasoning_effort": "max", "enable_thinking": True}
    assert result.prompt.startswith("<|im_start|>system\nThink as hard as you can.<|im_end|>\n")
    assert result.prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert result.starts_in_reasoning


def test_a_system_flag_goes_into_the_system_turn() -> None:
    chat = template("system_flag")
    result = chat.render([{"role": "system", "content": "Be brief."}, *USER], reasoning="off")
    assert result.prompt == "<system>Be brief.\n<user>Hi\n<assistant><think></think>"
    assert [record.to_dict() for record in result.applied] == [
        {"polyfill": "reasoning_intent", "detail": "/no_think added to messages[0] (system)"}
    ]
    assert not result.starts_in_reasoning
    assert chat.render(USER).starts_in_reasoning


def test_a_template_with_no_switch_gets_a_prefill_and_says_it_is_not_exact() -> None:
    chat = template("forced_open_strips_inline")
    result = chat.render(USER, reasoning="off")
    assert result.prompt == "<|User|>Hi<|Assistant|><think>\n</think>\n\n"
    assert (result.reasoning.mechanism, result.reasoning.exact) == ("prefill", False)
    assert result.generation_prompt == "<|Assistant|><think>\n</think>\n\n"


def test_a_budget_kwarg_takes_the_budget() -> None:
    result = template("budget_and_history_switch").render(USER, reasoning=1000)
    assert result.reasoning.emitted == {"thinking_budget": 1000}
    assert "<budget>1000</budget>" in result.prompt


def test_template_args_are_passed_and_the_unread_ones_reported() -> None:
    result = template("effort_enum").render(USER, template_args={"reasoning_effort": "high", "zq7_unused": 1})
    assert result.prompt.startswith("<|system|>Reasoning: high\n")
    assert result.unused_template_args == ("zq7_unused",)


def test_roles_content_and_arguments_are_rewritten_with_a_record() -> None:
    chat = template("no_system_strict_alternation")
    messages: list[dict[str, Any]] = [
        {"role": "developer", "content": "Rules."},
        {"role": "user", "content": [{"type": "text", "text": "A"}]},
        {"role": "user", "content": "B"},
    ]
    before = copy.deepcopy(messages)
    result = chat.render(messages, add_generation_prompt=False)
    assert messages == before  # the caller's messages are never touched
    assert result.prompt == "[user] Rules.\nA\nB\n"  # a string joined to blocks is a block; blocks join with "\n"
    assert [record.detail for record in result.applied] == [
        "messages[0]: developer -> system",
        "messages[0]: system merged into the first user turn",
        "messages[1]: merged into the user turn before it",
        "messages[0]: joined text blocks into a string",
    ]


def test_string_arguments_for_a_template_that_prints_them() -> None:
    chat = template("tools_string_arguments")
    call = {**CALL, "function": {"name": "f", "arguments": {"a": 1}}}
    result = chat.render([*USER, {"role": "assistant", "content": None, "tool_calls": [call]}])
    assert '<call>f {"a": 1}</call>' in result.prompt


@pytest.mark.parametrize(
    ("messages", "index", "field"),
    [
        ([{"role": "robot", "content": "x"}], 0, "role"),
        ([{"role": ["user"], "content": "x"}], 0, "role"),
        ([*USER, {"role": "assistant", "tool_calls": ["f()"]}], 1, "tool_calls[0]"),
        ([{"role": "user", "content": 3}], 0, "content"),
        ([{"role": "user", "content": [{"type": "text"}]}], 0, "content[0].text"),
        (
            [*USER, {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "{a"}}]}],
            1,
            "tool_calls[0].function.arguments",
        ),
        (
            [*USER, {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[1]"}}]}],
            1,
            "tool_calls[0].function.arguments",
        ),
        (
            [
                *USER,
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "nope", "content": "r"},
            ],
            2,
            "tool_call_id",
        ),
        ([*USER, {"role": "tool", "content": "r"}], 1, "role"),
        ([{"role": "user", "content": "x", "reasoning_content": 5}], 0, "reasoning_content"),
    ],
)
def test_bad_input_names_the_message_and_field(messages: list[dict[str, Any]], index: int, field: str) -> None:
    with pytest.raises(InputError) as raised:
        template("chatml_plain").render(messages)
    assert (raised.value.index, raised.value.field) == (index, field)


def test_a_missing_call_id_is_an_error_where_the_template_writes_ids() -> None:
    messages: list[dict[str, Any]] = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "r"},
    ]
    with pytest.raises(InputError) as raised:
        template("tools_object_arguments").render(messages)
    assert (raised.value.index, raised.value.field) == (2, "tool_call_id")
    assert template("tools_string_arguments").render(messages).prompt.endswith("tool: r")


@pytest.mark.parametrize("intent", ["max", -1, True, 1.5])
def test_an_intent_outside_the_set_is_an_input_error(intent: Any) -> None:
    with pytest.raises(InputError, match="reasoning must be"):
        template("chatml_plain").render(USER, reasoning=intent)


def test_an_unknown_polyfill_name_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown polyfills"):
        template("chatml_plain").render(USER, disable=["roles", "nope"])


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(function=_JSON_VALUES, arguments=_JSON_VALUES)
def test_tool_definitions_and_calls_are_written_as_json_dumps_writes_them_cached_or_not(
    function: Any, arguments: Any
) -> None:
    """The JSON text of definitions and calls is cached (NaN, infinities, huge integers and non-string keys are not
    cached, and must still come out as json.dumps writes them)."""
    tools = ({"type": "function", "function": function},)
    described = "\n".join([INSTRUCTIONS, json.dumps(function, ensure_ascii=False)])
    assert describe_tools(tools) == describe_tools(tools) == described
    text = json.dumps(arguments)  # NaN and the infinities come out as JSON that is not valid
    call = {"function": {"name": "f", "arguments": text}}
    try:
        parsed = orjson.loads(text)  # as arguments are parsed (a huge integer becomes a float)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        line = json.dumps({"name": "f", "arguments": parsed or {}}, ensure_ascii=False)
        assert call_text(call, 1, 0) == call_text(call, 1, 0) == line
    else:
        for _ in range(2):
            with pytest.raises(InputError) as raised:
                call_text(call, 1, 0)
            assert (raised.value.index, raised.value.field) == (1, "tool_calls[0].function.arguments")


def test_nan_in_tool_definitions_is_not_taken_for_a_cached_null() -> None:
    for value in (None, float("nan"), float("inf"), None):
        tools = ({"type": "function", "function": {"name": "f", "default": value}},)
        assert describe_tools(tools).endswith(json.dumps({"name": "f", "default": value}))


@pytest.mark.parametrize(("case", "field"), [("field_reasoning", "reasoning"), ("field_thinking_get", "thinking")])
def test_reasoning_goes_into_the_field_the_template_reads(case: str, field: str) -> None:
    turn = {"role": "assistant", "reasoning_content": "R", "content": "A"}
    result = template(case).render([*USER, turn], add_generation_prompt=False)
    assert result.prompt == "<|user|>Hi\n<|assistant|><think>R</think>A\n"
    assert [record.detail for record in result.applied] == [f"messages[1]: reasoning_content -> {field}"]


def test_a_system_flag_the_template_prints_is_used_and_the_record_says_so() -> None:
    result = template("system_flag_shown").render([{"role": "system", "content": "Be brief."}, *USER], reasoning="on")
    assert result.prompt == "<|system|>Be brief. detailed thinking on\n<|user|>Hi\n<|assistant|><think>\n"
    assert result.reasoning.to_dict() == {
        "intent": "on",
        "mechanism": "system_flag",
        "emitted": "detailed thinking on",
        "exact": True,
        "note": "the template prints detailed thinking on where the model reads it",
    }


def test_a_kwarg_is_preferred_to_a_system_flag_that_does_the_same() -> None:
    result = template("system_flag_and_kwarg").render(USER, reasoning="off")
    assert result.reasoning.emitted == {"enable_thinking": False}
    assert result.prompt == "<|user|>Hi\n<|assistant|><think></think>"


def test_reasoning_goes_where_the_state_the_render_uses_reads_it() -> None:
    chat = template("form_per_control_state")
    turn = [*USER, {"role": "assistant", "reasoning_content": "R", "content": "A"}, {"role": "user", "content": "B"}]
    on = chat.render(turn, reasoning="on")
    assert on.prompt == "<|user|>Hi\n<|assistant|><think>R</think>A\n<|user|>B\n<|assistant|><think>"
    assert on.applied == ()
    by_args = chat.render(turn, template_args={"thinking": True})
    assert by_args.prompt == on.prompt
    off = chat.render(turn)
    assert off.prompt == "<|user|>Hi\n<|assistant|></think>A\n<|user|>B\n<|assistant|><think></think>"
    assert [record.detail for record in off.applied] == ["messages[1]: reasoning dropped (the template shows none)"]


def test_a_flag_that_acts_in_the_user_turn_goes_there() -> None:
    result = template("user_turn_flag").render([{"role": "system", "content": "Be brief."}, *USER], reasoning="off")
    assert result.prompt == "<|system|>Be brief.\n<|user|>Hi /nothink\n<|assistant|><think></think>"
    assert [record.detail for record in result.applied] == ["/nothink added to messages[1] (the last user turn)"]


def test_a_kwarg_that_acts_only_without_a_system_turn_is_recorded_as_unheard_beside_one() -> None:
    """`without_system`: the kwarg rewrites the template's default system prompt, so a request with its own system
    message gets none of its effect; it is still sent, and the record says so instead of claiming it was honoured."""
    chat = template("reasoning_section_switch")
    alone = chat.render(USER, reasoning="on")
    assert alone.reasoning.to_dict() == {
        "intent": "on",
        "mechanism": "kwarg",
        "emitted": {"careful": True},
        "exact": True,
        "note": "",
    }
    beside = chat.render([{"role": "system", "content": "Be brief."}, *USER], reasoning="on")
    note = (
        "careful acts only without a system message (it rewrites the template's default system prompt); the request "
        "has one, so the template ignores it"
    )
    assert beside.prompt == "<|system|>Be brief.\n<|user|>Hi\n<|assistant|>"
    assert (beside.reasoning.exact, beside.reasoning.note, beside.warnings) == (False, note, (note,))


def test_a_whole_text_flag_is_a_new_system_turn_and_never_replaces_the_requests_own() -> None:
    chat = template("whole_text_flag")
    on = chat.render(USER, reasoning="on")
    assert on.prompt == "<|user|>Hi\n<|assistant|><think>\n"
    assert [record.detail for record in on.applied] == ["detailed thinking on added as a new system turn"]
    kept = chat.render([{"role": "system", "content": "Be brief."}, *USER], reasoning="on")
    assert kept.prompt == "<|system|>Be brief.<|user|>Hi\n<|assistant|><think></think>"
    assert kept.reasoning.note == (
        "the template acts on detailed thinking on only as a turn's whole text, and the request's own text is kept"
    )
