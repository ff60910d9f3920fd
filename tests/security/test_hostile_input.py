"""Hostile requests (strategies_hostile.py) through every zoo template, via `ChatTemplate.render` and the server entry
point `hook.prerender`: each ends in a typed chatcaps error or a result, never another exception, never a hang.

Sized for CI (the whole security suite in about three minutes on two cores): 40 examples on jinja2, 20 on minijinja,
each rendered by every zoo template (243) both ways; derandomized, so a failure reproduces.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from chatcaps import ChatTemplate
from chatcaps.engines import DEFAULT_LIMITS, EngineName
from chatcaps.errors import ChatcapsError, InputError
from chatcaps.hook import prerender
from chatcaps.zoo import ZooTemplate

from .harness import nested
from .strategies_hostile import DEEP, hostile_render_calls, hostile_request_bodies

CALL_BUDGET_S = 3 * DEFAULT_LIMITS.time_s + 1.5
"""One call renders at most three times (the prompt, and the generation prompt for new template_args: two)."""
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _templates(zoo: tuple[ZooTemplate, ...], engine: EngineName) -> list[ChatTemplate]:
    templates = [
        ChatTemplate(item.read(), bos_token=item.bos_token, eos_token=item.eos_token, engine=engine) for item in zoo
    ]
    for template in templates:
        template.caps  # noqa: B018 - detected once, outside the timed calls
    return templates


@pytest.fixture(scope="module")
def jinja2_templates(zoo: tuple[ZooTemplate, ...]) -> list[ChatTemplate]:
    return _templates(zoo, "jinja2")


@pytest.fixture(scope="module")
def minijinja_templates(zoo: tuple[ZooTemplate, ...]) -> list[ChatTemplate]:
    return _templates(zoo, "minijinja")


def _every_template(templates: list[ChatTemplate], call: dict[str, Any], body: Any) -> None:
    """Both entry points on every template: a chatcaps error or a result; the slowest call within budget."""
    slowest = 0.0
    for template in templates:
        for entry in ("render", "prerender"):
            started = time.perf_counter()
            with contextlib.suppress(ChatcapsError):
                template.render(**call) if entry == "render" else prerender(body, template)
            slowest = max(slowest, time.perf_counter() - started)
    assert slowest <= CALL_BUDGET_S


@settings(FUZZ, max_examples=40)
@given(call=hostile_render_calls(), body=hostile_request_bodies())
def test_jinja2_answers_hostile_requests_with_chatcaps_errors_or_results(
    jinja2_templates: list[ChatTemplate], call: dict[str, Any], body: Any
) -> None:
    _every_template(jinja2_templates, call, body)


@settings(FUZZ, max_examples=20)
@given(call=hostile_render_calls(), body=hostile_request_bodies())
def test_minijinja_answers_hostile_requests_with_chatcaps_errors_or_results(
    minijinja_templates: list[ChatTemplate], call: dict[str, Any], body: Any
) -> None:
    _every_template(minijinja_templates, call, body)


def test_input_nested_past_the_recursion_limit_is_an_input_error(jinja2_templates: list[ChatTemplate]) -> None:
    """Every template, deep content and deep tool-call arguments: InputError, not RecursionError."""
    deep_content: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "hi", "extra": nested(DEEP, "list")}]}
    ]
    call = {"id": "call00001", "type": "function", "function": {"name": "f", "arguments": nested(DEEP, "dict")}}
    deep_call: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    for template in jinja2_templates:
        for messages in (deep_content, deep_call):
            with pytest.raises(InputError, match="nested too deeply"):
                template.render(messages)
            with pytest.raises(InputError, match="nested too deeply"):
                prerender({"messages": messages}, template)


def test_anested_value_in_an_error_message_is_shown_short(jinja2_templates: list[ChatTemplate]) -> None:
    template = jinja2_templates[0]
    deep = nested(DEEP, "list")
    with pytest.raises(InputError, match=r"got \[\[\[\[\.\.\.\]\]\]\]"):
        template.render([{"role": "user", "content": "hi"}], reasoning=deep)
    with pytest.raises(InputError, match=r"unknown role \[\[\[\[\.\.\.\]\]\]\]"):
        template.render([{"role": nested(400, "list"), "content": "hi"}])
    with pytest.raises(InputError, match=r"request.add_generation_prompt must be true or false, got \[\[\[\[\.\.\.\]"):
        prerender({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": deep}, template)
    with pytest.raises(InputError, match="template_args cannot be written as JSON"):
        template.render([{"role": "user", "content": "hi"}], template_args={"x": nested(300, "dict")})


def test_messages_or_tools_that_are_not_lists_are_input_errors(jinja2_templates: list[ChatTemplate]) -> None:
    template = jinja2_templates[0]
    with pytest.raises(InputError, match="messages must be a list, got NoneType"):
        template.render(None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="tools must be a list, got int"):
        template.render([{"role": "user", "content": "hi"}], tools=5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"messages\[1\]\.tool_calls\[0\]\.id: must be a string, got list"):
        template.render(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": [1], "function": {"name": "f", "arguments": {}}}]},
            ]
        )
