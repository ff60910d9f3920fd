"""The steps `ChatTemplate.render` leaves out (`live_steps`) are exactly those that would change nothing: over the zoo,
every context and a few text chats give the same request, records and plan through the steps kept as through all."""

from __future__ import annotations

from typing import Any

import pytest

from chatcaps import ChatTemplate
from chatcaps.caps import Caps
from chatcaps.contexts import Context
from chatcaps.engines.conversation import plain_data
from chatcaps.polyfills import STEPS, Options, Request, is_content_only, is_text_chat, live_steps, run_pipeline
from chatcaps.polyfills.normalise import normalise
from chatcaps.polyfills.validate import validate_messages
from chatcaps.zoo import ZooTemplate

TEXT_CHATS: tuple[list[dict[str, Any]], ...] = (
    [{"role": "user", "content": ""}],
    [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "A"}, {"role": "user", "content": "B"}],
    [{"role": "user", "content": "A"}, {"role": "system", "content": "S"}, {"role": "assistant", "content": "C"}],
    [{"role": "assistant", "content": "A"}, {"role": "assistant", "content": "B"}, {"role": "user", "content": "U"}],
)


_CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
OTHER_CHATS: tuple[list[dict[str, Any]], ...] = (
    [{"role": "system", "content": [{"type": "text", "text": "S"}]}, {"role": "user", "content": "A", "name": "u"}],
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "A"}]}, {"role": "user", "content": "B"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": [_CALL]}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "", "reasoning_content": "R"}],
)
"""Requests of other shapes: content-only chats, and chats that are not for a call or a reasoning field alone."""


def _request(messages: Any, tools: Any) -> Request:
    return Request(tuple(plain_data(list(messages))), None if tools is None else tuple(plain_data(list(tools))))


def _same_through_kept_steps(caps: Caps, request: Request, options: Options) -> None:
    text_chat, canonical, content_only = validate_messages(list(request.messages), caps)
    assert (text_chat and request.tools is None) is is_text_chat(request)
    assert (content_only and request.tools is None) is is_content_only(request)
    assert canonical is (normalise(request, caps, options)[0] is request)
    kept = live_steps(caps, text_chat=is_text_chat(request), canonical=canonical, content_only=is_content_only(request))
    assert run_pipeline(request, caps, options, kept) == run_pipeline(request, caps, options, tuple(STEPS.values()))


def test_leaving_out_steps_changes_nothing(zoo_template: ZooTemplate, contexts: tuple[Context, ...]) -> None:
    caps = ChatTemplate(zoo_template.read(), bos_token=zoo_template.bos_token, eos_token=zoo_template.eos_token).caps
    for context in contexts:
        options = Options(
            reasoning=context.reasoning,  # type: ignore[arg-type]
            template_args=context.template_args,
            prefill=context.add_generation_prompt and not context.continue_final_message,
            continued=context.continue_final_message,
        )
        _same_through_kept_steps(caps, _request(context.messages, context.tools), options)
    for messages in (*TEXT_CHATS, *OTHER_CHATS):
        _same_through_kept_steps(caps, _request(messages, None), Options())


@pytest.mark.parametrize(
    ("messages", "tools", "expected"),
    [
        ([{"role": "user", "content": "Hi"}], None, True),
        ([], None, True),
        ([{"role": "user", "content": "Hi"}], [], False),
        ([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], None, False),
        ([{"role": "user", "content": None}], None, False),
        ([{"role": "assistant", "content": "A", "reasoning_content": "R"}], None, False),
        ([{"role": "user", "content": "Hi", "name": "ann"}], None, False),
    ],
)
def test_a_text_chat_is_roles_and_strings_only(messages: Any, tools: Any, expected: bool) -> None:
    assert is_text_chat(_request(messages, tools)) is expected


@pytest.mark.parametrize(
    ("messages", "tools", "expected"),
    [
        (OTHER_CHATS[0], None, True),
        (OTHER_CHATS[1], None, True),
        (OTHER_CHATS[1], [], False),
        (OTHER_CHATS[2], None, False),
        (OTHER_CHATS[3], None, False),
        ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "A", "thinking": None}], None, False),
    ],
)
def test_a_content_only_chat_has_no_tools_calls_results_or_reasoning(messages: Any, tools: Any, expected: bool) -> None:
    assert is_content_only(_request(messages, tools)) is expected


@pytest.mark.parametrize(
    ("message", "canonical"),
    [
        ({"role": "user", "content": "Hi"}, True),
        ({"role": "user", "content": None}, True),
        ({"role": "user", "content": "Hi", "name": None}, False),
        ({"role": "assistant", "content": "A", "tool_calls": []}, False),
        ({"role": "assistant", "content": "A", "tool_calls": None}, False),
        ({"role": "assistant", "content": "A", "reasoning_content": "R"}, True),
        ({"role": "assistant", "content": "A", "thinking": "R"}, False),
        ({"role": "assistant", "content": "A", "reasoning": "R"}, False),
        ({"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image", "url": "u"}]}, True),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}, False),
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "d"}}]}, False),
    ],
)
def test_canonical_input_is_what_normalise_leaves_as_it_is(message: dict[str, Any], canonical: bool) -> None:
    caps = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}").caps
    request = _request([message], None)
    assert validate_messages(list(request.messages), caps)[1] is canonical
    assert (normalise(request, caps, Options())[0] is request) is canonical


@pytest.mark.parametrize(
    ("block", "respelled"),
    [
        (
            {"type": "image_url", "image_url": {"url": "u", "detail": "high"}, "extra": 1},
            {"type": "image", "url": "u", "extra": 1},
        ),
        ({"extra": 0, "type": "image_url", "image_url": "u"}, {"type": "image", "url": "u", "extra": 0}),
        (
            {"type": "input_audio", "input_audio": {"data": "d", "format": "wav"}, "z": 2},
            {"type": "audio", "base64": "d", "format": "wav", "z": 2},
        ),
        ({"type": "input_audio", "input_audio": "raw"}, {"type": "audio", "base64": "raw"}),
    ],
)
def test_normalise_respells_openai_blocks_keeping_their_other_keys(block: Any, respelled: Any) -> None:
    caps = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}").caps
    request, applied = normalise(_request([{"role": "user", "content": [block]}], None), caps, Options())
    assert request.messages == ({"role": "user", "content": [respelled]},)
    assert [list(message["content"][0]) for message in request.messages] == [list(respelled)]
    assert [record.detail for record in applied] == [f"messages[0].content: {block['type']} -> {respelled['type']}"]
