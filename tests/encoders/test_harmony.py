"""gpt-oss's Jinja template and chatcaps' reading of its replies against openai-harmony, gpt-oss's reference renderer
and parser.

openai-harmony needs its vocabulary file, `o200k_base.tiktoken` (checked against its sha256), in the folder
`TIKTOKEN_ENCODINGS_BASE` names, or a download: it renders and parses token ids only, so without the file it does
nothing at all, text-level rendering included. The package registries do not ship the file; these tests skip with one
line where it is absent.
"""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from chatcaps import ChatTemplate, sources
from chatcaps.zoo import ZooTemplate

harmony = pytest.importorskip("openai_harmony", reason="openai-harmony is not installed (the test extra)")

VOCABULARY = Path(os.environ.get("TIKTOKEN_ENCODINGS_BASE", "/nonexistent")) / "o200k_base.tiktoken"
pytestmark = pytest.mark.skipif(
    not VOCABULARY.is_file(),
    reason="openai-harmony's vocabulary (o200k_base.tiktoken under TIKTOKEN_ENCODINGS_BASE) is absent here",
)
GPT_OSS = "llamacpp__openai-gpt-oss-120b.jinja"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "user": ([{"role": "user", "content": "Weather in Paris?"}], None),
    "system": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}], None),
    "multi_turn": (
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Weather in Paris?"},
        ],
        None,
    ),
    "tools": ([{"role": "user", "content": "Weather in Paris?"}], [WEATHER]),
}
"""Conversations whose harmony form is the one servers give it: the first system message as the developer's
instructions, the tools as the developer's function tools, a past assistant turn on the final channel."""


@pytest.fixture(scope="module")
def encoding() -> Any:
    return harmony.load_harmony_encoding(harmony.HarmonyEncodingName.HARMONY_GPT_OSS)


@pytest.fixture(scope="module")
def template(zoo: tuple[ZooTemplate, ...]) -> ChatTemplate:
    (found,) = (entry for entry in zoo if entry.file == GPT_OSS)
    return ChatTemplate(sources.from_file(found.path))


def _conversation(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
    """The conversation in openai-harmony's terms, as servers map a chat request onto it."""
    system = harmony.SystemContent.new().with_conversation_start_date(date.today().isoformat())
    rendered = [harmony.Message.from_role_and_content(harmony.Role.SYSTEM, system)]
    instructions = messages[0]["content"] if messages[0]["role"] in {"system", "developer"} else None
    rest = messages[1:] if instructions is not None else messages
    if instructions is not None or tools:
        developer = harmony.DeveloperContent.new()
        if instructions is not None:
            developer = developer.with_instructions(instructions)
        if tools:
            described = [
                harmony.ToolDescription.new(
                    tool["function"]["name"], tool["function"]["description"], tool["function"]["parameters"]
                )
                for tool in tools
            ]
            developer = developer.with_function_tools(described)
        rendered.append(harmony.Message.from_role_and_content(harmony.Role.DEVELOPER, developer))
    for message in rest:
        turn = harmony.Message.from_role_and_content(harmony.Role(message["role"]), message["content"])
        rendered.append(turn.with_channel("final") if message["role"] == "assistant" else turn)
    return harmony.Conversation.from_messages(rendered)


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_the_jinja_template_renders_as_openai_harmony(name: str, encoding: Any, template: ChatTemplate) -> None:
    messages, tools = CONVERSATIONS[name]
    tokens = encoding.render_conversation_for_completion(_conversation(messages, tools), harmony.Role.ASSISTANT)
    assert template.render_raw(messages, tools=tools) == encoding.decode_utf8(tokens)


REPLIES: dict[str, list[tuple[str, str | None, str]]] = {
    "answer": [("analysis", None, "Zq7Reasoning"), ("final", None, "Zq7Answer")],
    "call": [("analysis", None, "Zq7Reasoning"), ("commentary", "functions.get_weather", '{"city": "Paris"}')],
}
"""Replies as (channel, recipient, text) messages: openai-harmony renders them, both sides read them back."""


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_chatcaps_reads_a_reply_as_openai_harmony_parses_it(name: str, encoding: Any, template: ChatTemplate) -> None:
    tokens: list[int] = []
    for channel, recipient, text in REPLIES[name]:
        message = harmony.Message.from_role_and_content(harmony.Role.ASSISTANT, text).with_channel(channel)
        if recipient is not None:
            message = message.with_recipient(recipient).with_content_type("<|constrain|>json")
        tokens += encoding.render(message)
    parsed = encoding.parse_messages_from_completion_tokens(tokens, harmony.Role.ASSISTANT)
    text = encoding.decode_utf8(tokens)
    header = "<|start|>assistant"
    assert text.startswith(header)  # the generation prompt's own text: the model writes what follows it
    reply = template.render([{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER]).parse_reply(
        text[len(header) :]
    )
    said = {message.channel: message.content[0].text for message in parsed}
    assert reply.reasoning_content == said["analysis"]
    calls = [message for message in parsed if message.recipient]
    assert [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in reply.tool_calls] == [
        (message.recipient.removeprefix("functions."), json.loads(message.content[0].text)) for message in calls
    ]
    assert (reply.content or None) == said.get("final")
