"""What says it is immutable is: module tables are read-only, and a shared `ChatTemplate` stays bounded however many
distinct template kwargs its clients send."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import chatcaps
from chatcaps import ChatTemplate
from chatcaps.defaults import PROMPTS_PER_TEMPLATE
from chatcaps.hook import EFFORT_INTENTS
from chatcaps.polyfills import STEPS
from chatcaps.render import RenderResult
from chatcaps.vocab import BLOCK_FORMS

TEMPLATE = (
    "{%- for message in messages %}<|{{ message.role }}|>{{ message.content }}<|end|>{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{{ persona | default('') }}{%- endif %}"
)
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("table", "key", "value"),
    [
        (chatcaps.TIER_BUDGETS, "low", 1),
        (EFFORT_INTENTS, "none", "on"),
        (STEPS, "normalise", None),
        (BLOCK_FORMS, "thinking_block", ("x", "y")),
    ],
)
def test_module_tables_refuse_assignment(table: Any, key: str, value: object) -> None:
    before = dict(table)
    with pytest.raises(TypeError):
        table[key] = value
    with pytest.raises(TypeError):
        del table[key]
    assert dict(table) == before


def test_distinct_template_args_leave_the_prompt_cache_at_its_bound() -> None:
    chat = ChatTemplate(TEMPLATE)
    for number in range(1000):
        result = chat.render(MESSAGES, template_args={"persona": f"P{number}"})
        assert result.prompt == f"<|user|>Hi<|end|><|assistant|>P{number}"
        assert result.generation_prompt == f"<|assistant|>P{number}"
    assert PROMPTS_PER_TEMPLATE == 128
    assert len(chat._prompts) == PROMPTS_PER_TEMPLATE
    # An entry long evicted is measured again, and right.
    assert chat.render(MESSAGES, template_args={"persona": "P0"}).generation_prompt == "<|assistant|>P0"
    assert len(chat._prompts) == PROMPTS_PER_TEMPLATE


def test_the_prompt_cache_is_shared_safely_between_threads() -> None:
    chat = ChatTemplate(TEMPLATE)

    def generation_prompt(number: int) -> str:
        return chat.render(MESSAGES, template_args={"persona": f"T{number % 300}"}).generation_prompt

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = list(pool.map(generation_prompt, range(2000)))
    assert found == [f"<|assistant|>T{number % 300}" for number in range(2000)]
    assert len(chat._prompts) == PROMPTS_PER_TEMPLATE


def test_a_render_result_is_a_whole_frozen_render_result() -> None:
    """`render` builds its result without the dataclass `__init__`: every field is set, and it is still frozen."""
    result = ChatTemplate(TEMPLATE).render(MESSAGES, template_args={"persona": "P"})
    rebuilt = RenderResult(**{field.name: getattr(result, field.name) for field in dataclasses.fields(RenderResult)})
    assert result == rebuilt
    assert vars(result) == vars(rebuilt)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.prompt = "changed"  # type: ignore[misc]


def test_a_plan_is_made_once_per_caps_and_intent() -> None:
    chat = ChatTemplate(
        "{%- for message in messages %}{{ message.content }}{%- endfor %}"
        "{%- if add_generation_prompt %}<|assistant|>{%- if enable_thinking %}<think>{%- endif %}{%- endif %}"
    )
    first = chat.render(MESSAGES, reasoning="on").reasoning
    assert chat.render(MESSAGES, reasoning="on").reasoning is first
    assert first.emitted == {"enable_thinking": True}
    with pytest.raises(TypeError):
        first.emitted["enable_thinking"] = False  # type: ignore[index]
    assert first.to_dict()["emitted"] == {"enable_thinking": True}
    preset = chat.render(MESSAGES, reasoning="on", template_args={"enable_thinking": False}).reasoning
    assert (preset.mechanism, preset.emitted) == ("template_args", None)
