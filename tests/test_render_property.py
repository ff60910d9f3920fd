"""Property: any valid canonical conversation (tests/strategies.py) renders through every zoo template with polyfills
on, or raises a typed chatcaps error; never an unhandled exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from strategies import conversations

from chatcaps import ChatTemplate, InputError, TemplateRenderError
from chatcaps.zoo import ZooTemplate


@pytest.fixture(scope="module")
def templates(zoo: tuple[ZooTemplate, ...]) -> list[ChatTemplate]:
    return [ChatTemplate(source.read(), bos_token=source.bos_token, eos_token=source.eos_token) for source in zoo]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=conversations())
def test_valid_conversations_never_raise_anything_untyped(
    templates: list[ChatTemplate], request: dict[str, Any]
) -> None:
    for template in templates:
        try:
            template.render(
                request["messages"],
                tools=request["tools"],
                reasoning=request["reasoning"],
                add_generation_prompt=request["add_generation_prompt"],
                continue_final_message=request["continue_final_message"],
            )
        except TemplateRenderError:
            continue  # the template's own raise_exception (a role it refuses, a format it insists on): typed
        except InputError as error:
            # Valid input is never refused, except a final message the template itself cuts or rewrites.
            assert request["continue_final_message"], error
