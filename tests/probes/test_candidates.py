"""find_candidates: what reading a template proposes to probe (variables, their values, fields, block types, flags)."""

from __future__ import annotations

import jinja2.meta
import pytest

from chatcaps.errors import TemplateSyntaxError
from chatcaps.probes.candidates import _ENV, Candidates, find_candidates
from chatcaps.vocab import STANDARD_VARIABLES
from chatcaps.zoo import ZooTemplate


def values(source: str) -> dict[str, tuple[object, ...]]:
    return dict(find_candidates(source).values)


def typed(items: tuple[object, ...]) -> list[tuple[type, object]]:
    """`(1, True) == (True, 1)` in Python; compare the types too."""
    return [(type(item), item) for item in items]


def test_a_keyword_argument_tested_against_false() -> None:
    found = find_candidates("{% if enable_thinking is defined and enable_thinking is false %}x{% endif %}")
    assert found.variables == ("enable_thinking",)
    assert dict(found.values) == {"enable_thinking": (False,)}


def test_is_true_is_none_and_sameas_give_their_constants() -> None:
    source = "{% if a is true %}{% endif %}{% if a is none %}{% endif %}{% if a is sameas 3 %}{% endif %}"
    assert values(source) == {"a": (True, None, 3)}


def test_an_alias_with_a_default_collects_the_default_and_every_compared_value() -> None:
    source = (
        '{%- set effort = reasoning_effort | default("medium") -%}'
        '{% if effort == "high" %}H{% elif effort in ["low", "minimal"] %}L{% endif %}'
    )
    assert find_candidates(source).variables == ("reasoning_effort",)
    assert values(source) == {"reasoning_effort": ("medium", "high", "low", "minimal")}


def test_equality_either_way_round_and_not_in_a_tuple() -> None:
    source = "{% if thinking_mode == 'on' %}{% endif %}{% if 'off' != thinking_mode %}{% endif %}"
    source += "{% if thinking_mode not in ('auto',) %}{% endif %}"
    assert values(source) == {"thinking_mode": ("on", "off", "auto")}


def test_ordering_comparisons_and_negative_numbers() -> None:
    source = "{% if thinking_budget > 0 %}{% endif %}{% if thinking_budget <= -1 %}{% endif %}"
    assert values(source) == {"thinking_budget": (0, -1)}


def test_a_default_set_when_the_variable_is_not_defined() -> None:
    source = '{% if reasoning_effort is not defined %}{% set reasoning_effort = "medium" %}{% endif %}'
    assert values(source) == {"reasoning_effort": ("medium",)}


def test_a_namespace_attribute_set_from_a_variable_stands_for_it() -> None:
    source = (
        "{% set ns = namespace(keep=false) %}{% set ns.keep = keep_past_thinking | default(true) %}"
        "{% if ns.keep is false %}{% endif %}"
    )
    found = find_candidates(source)
    assert dict(found.values) == {"keep_past_thinking": (True, False)}
    assert found.message_fields == ()  # ns.keep is template state, not a field of the input


def test_aliases_through_or_lower_and_a_conditional_and_a_chain_of_two() -> None:
    source = (
        "{% set a = mode or 'auto' %}{% if a == 'x' %}{% endif %}"
        "{% set b = effort if effort is defined else 'low' %}{% set c = b | lower %}{% if c == 'high' %}{% endif %}"
        "{% set d = 'on' if level is not defined else level %}{% if d == 'off' %}{% endif %}"
    )
    assert values(source) == {"effort": ("low", "high"), "level": ("on", "off"), "mode": ("auto", "x")}


def test_case_filters_on_the_compared_side_are_seen_through() -> None:
    assert values("{% if effort | lower == 'high' %}{% endif %}") == {"effort": ("high",)}


def test_string_containment_and_keyed_reads_give_no_values() -> None:
    source = "{% if mode in 'abc' %}{% endif %}{% if opts['x'] == 1 %}{% endif %}{% if opts.get('y') == 2 %}{% endif %}"
    assert values(source) == {"mode": (), "opts": ()}


def test_containers_are_variables_a_value_is_looked_up_in() -> None:
    source = (
        "{% set listed = builtin | default([]) %}{% for m in messages %}{% if m.name in listed %}{% endif %}"
        "{% if 'x' not in other %}{% endif %}{% if m.role in ['user'] %}{% endif %}{% endfor %}{{ plain }}"
    )
    assert find_candidates(source).containers == ("builtin", "other")


def test_values_keep_one_true_and_one_point_zero_apart_and_drop_repeats() -> None:
    source = "{% if x == 1 %}{% elif x is true %}{% elif x == 1.0 %}{% elif x == 1 %}{% elif x == true %}{% endif %}"
    assert typed(find_candidates(source).values["x"]) == [(int, 1), (bool, True), (float, 1.0)]


def test_standard_variables_are_left_out_and_the_rest_sorted() -> None:
    source = (
        "{{ bos_token }}{% for m in messages %}{{ zeta }}{% endfor %}{{ alpha }}{% if tools %}{% endif %}"
        "{{ raise_exception('x') if false }}{{ namespace(a=1) }}{{ range(3) }}{{ continue_final_message }}"
    )
    assert find_candidates(source).variables == ("alpha", "zeta")


def test_every_variable_has_an_entry() -> None:
    assert dict(find_candidates("{{ custom_tools }}{{ date_string }}").values) == {
        "custom_tools": (),
        "date_string": (),
    }


def test_flags_are_strings_looked_for_in_text_or_replaced_out_of_it() -> None:
    source = (
        "{% if '/no_think' in messages[0].content %}{% endif %}{{ m.content | replace('/think', '') }}"
        "{{ m.content.replace('/nothink', '') }}{% if 'a' in ['a', 'b'] %}{% endif %}{% if 'b' in 'abc' %}{% endif %}"
    )
    assert find_candidates(source).flags == ("/no_think", "/nothink")


def test_message_fields_are_attribute_key_and_get_reads_but_not_method_calls() -> None:
    source = (
        "{% if message.reasoning_content %}{{ message['thinking'] }}{{ message.get('thought') }}{% endif %}"
        "{{ message.content.strip() }}{{ message.content.split('x')[0] }}{% for k, v in message.items() %}{% endfor %}"
        "{% for m in messages %}{{ loop.index }}{% endfor %}"
    )
    assert find_candidates(source).message_fields == ("reasoning_content", "thinking", "thought", "content")


def test_block_types_are_strings_compared_with_a_type() -> None:
    source = (
        "{% for c in message.content %}{% if c.type == 'thinking' %}{% elif c['type'] in ['image', 'video'] %}"
        "{% elif message.content[0].type == 'thoughts' %}{% elif 'text' == c.type %}{% endif %}{% endfor %}"
        "{{ message.content | selectattr('type', 'equalto', 'audio') | list }}{% if c.kind == 'nope' %}{% endif %}"
    )
    assert find_candidates(source).block_types == ("thinking", "image", "video", "thoughts", "text", "audio")


def test_literals_are_string_constants_in_source_order_without_text_or_repeats() -> None:
    source = "plain text{{ '<think>' }}{% if x %}{{ '</think>' if y else '<think>' }}{% endif %}{{ 3 }}"
    assert find_candidates(source).literals == ("<think>", "</think>")


def test_the_generation_tag_parses_and_its_body_is_read() -> None:
    source = (
        "{% for m in messages %}{% generation %}{{ m.reasoning }}{% if effort == 'x' %}{% endif %}"
        "{% endgeneration %}{% endfor %}"
    )
    found = find_candidates(source)
    assert (found.variables, found.message_fields, dict(found.values)) == (
        ("effort",),
        ("reasoning",),
        {"effort": ("x",)},
    )


def test_a_template_that_does_not_parse_raises_with_its_line() -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        find_candidates("line one\n  {% if x %}\n{% endfor %}")
    assert (caught.value.template_name, caught.value.line, caught.value.column) == ("<template>", 3, 4)  # `endfor`
    with pytest.raises(TemplateSyntaxError) as caught:
        find_candidates("{{ x. }}", name="broken.jinja")
    assert str(caught.value).startswith("broken.jinja:1:7: ")


def test_candidates_are_frozen() -> None:
    found = find_candidates("{{ x }}")
    assert isinstance(found, Candidates)
    with pytest.raises(AttributeError):
        found.variables = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        found.values["x"] = ()  # type: ignore[index]


SCOPING = [
    "{% macro m() %}{{ caller() }}{{ kwargs }}{{ varargs }}{% endmacro %}",
    "{% for x in y %}{{ loop.index }}{% else %}{{ loop }}{% endfor %}",
    "{% for x in y if x.a and z %}{{ x }}{% endfor %}{{ x }}",
    "{% if a %}{% set b = 1 %}{% endif %}{{ b }}",
    "{% call m(q) %}{{ caller }} {{ r }}{% endcall %}",
    "{% call(u) m(q) %}{{ u }} {{ r }}{% endcall %}",
    "{% filter upper %}{{ f }}{% set g = 1 %}{% endfilter %}{{ g }}",
    "{% set h %}{{ i }}{% endset %}{{ h }}",
    "{% block b %}{{ self }}{{ super() }}{{ j }}{% endblock %}{{ self }}",
    "{% for a in b %}{% for c in a %}{{ loop.index }}{{ d }}{% set e = 1 %}{% endfor %}{{ e }}{% endfor %}",
    "{% macro m(a, b=c) %}{% for x in a %}{{ x }}{{ n }}{% endfor %}{% endmacro %}{{ m(1) }}",
    "{% with a = b %}{{ a }}{{ c }}{% endwith %}",
    "{% if x %}{% for i in y %}{{ z }}{% endfor %}{% elif w %}{% macro q() %}{{ v }}{% endmacro %}{% else %}{{ u }}"
    "{% endif %}",
    "{% generation %}{{ g1 }}{% set g2 = 1 %}{% endgeneration %}{{ g2 }}",
]


@pytest.mark.parametrize("source", SCOPING)
def test_variables_are_what_jinja2_meta_finds(source: str) -> None:
    """find_candidates tracks scopes itself (jinja2.meta compiles the whole template); the answers must agree."""
    expected = jinja2.meta.find_undeclared_variables(_ENV.parse(source)) - STANDARD_VARIABLES
    assert find_candidates(source).variables == tuple(sorted(expected))


def test_every_zoo_template_gives_candidates_and_the_variables_jinja2_meta_finds(zoo_template: ZooTemplate) -> None:
    source = zoo_template.read()
    expected = jinja2.meta.find_undeclared_variables(_ENV.parse(source)) - STANDARD_VARIABLES
    assert find_candidates(source).variables == tuple(sorted(expected))


def zoo_candidates(zoo: tuple[ZooTemplate, ...], file: str) -> Candidates:
    [template] = [template for template in zoo if template.file == file]
    return find_candidates(template.read())


def test_zoo_qwen3_switches_thinking_off_with_enable_thinking_false(zoo: tuple[ZooTemplate, ...]) -> None:
    found = zoo_candidates(zoo, "llamacpp__Qwen-Qwen3-0.6B.jinja")
    # content and reasoning_content are set only in some branches, so jinja2 may also look them up in the context
    assert found.variables == ("content", "enable_thinking", "reasoning_content")
    assert found.values["enable_thinking"] == (False,)
    assert found.flags == ("</think>",)
    assert found.message_fields == (
        "role",
        "content",
        "reasoning_content",
        "tool_calls",
        "function",
        "name",
        "arguments",
    )
    assert {"<think>", "</think>"} <= set(found.literals)


def test_zoo_gpt_oss_defaults_reasoning_effort_to_medium(zoo: tuple[ZooTemplate, ...]) -> None:
    found = zoo_candidates(zoo, "llamacpp__openai-gpt-oss-120b.jinja")
    assert found.values["reasoning_effort"] == ("medium",)
    assert found.values["model_identity"] == ("You are ChatGPT, a large language model trained by OpenAI.",)
    assert found.flags == (
        "content",
        "<|channel|>analysis<|message|>",
        "<|channel|>final<|message|>",
        "thinking",
        "tool_calls",
    )
    assert "thinking" in found.message_fields


def test_zoo_nemotron_nano_v2_is_switched_by_think_flags_in_the_system_message(zoo: tuple[ZooTemplate, ...]) -> None:
    found = zoo_candidates(zoo, "llamacpp__NVIDIA-Nemotron-Nano-v2.jinja")
    assert found.variables == ()
    assert found.flags == ("/think", "/no_think", "tool_calls", "</think>")
    assert {"<think></think>", "<think>\n"} <= set(found.literals)


@pytest.mark.parametrize(
    ("source", "reads_items"),
    [
        ("{% for k, v in message.items() %}{{ k }}{% endfor %}", True),
        ("{% for v in message.values() %}{{ v }}{% endfor %}", True),
        ("{% for k, v in message | dictsort %}{{ k }}{% endfor %}", True),
        ("{% for k, v in message | items %}{{ k }}{% endfor %}", True),
        ("{{ message.content }}{{ message.get('thinking') }}", False),
    ],
)
def test_walking_a_mappings_items_is_noted(source: str, reads_items: bool) -> None:
    assert find_candidates(source).reads_items is reads_items


def test_whole_flags_are_strings_a_message_content_is_compared_with() -> None:
    source = (
        "{% set system_message = messages[0]['content'] | trim %}{% if system_message == 'detailed thinking on' %}"
        "{% endif %}{% if m.content != '' %}{% endif %}{% if 'x' == m.role %}{% endif %}"
        "{% if m.content == '/no_think' or '/no_think' in m.content %}{% endif %}"
    )
    assert find_candidates(source).whole_flags == ("detailed thinking on",)
