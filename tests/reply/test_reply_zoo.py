"""Round trip over the zoo: every template with reasoning markers renders an assistant turn with reasoning and content,
and `parse_reply` reads the part the model would have written back into the same two texts.

The model's part is the turn's render past the longest prefix it shares with the prompt's (the generation prompt
render of the same chat), and past the assistant header where the template spaces a past turn's header otherwise
than the generation prompt's; the prefix is that prompt, and the end of turn is what the template writes after the
content (`end_of_turn_in`). Each template is tried with the template's default reasoning state and with reasoning
"on"; it passes when either reads back. The templates that do not, and why, are in tests/data/reply/zoo_failures.json
and in docs/reply.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from paths import ROOT
from test_reply import byte_tokenizer
from test_reply_calls_zoo import past_header
from transformers.utils.chat_parsing import parse_response

from chatcaps import ChatTemplate, Reply, ReplyStream, parse_reply
from chatcaps.caps import Caps
from chatcaps.errors import ChatcapsError
from chatcaps.intent import Intent
from chatcaps.reply import end_of_turn_in, response_template
from chatcaps.zoo import ZooTemplate

FAILURES: dict[str, str] = json.loads((ROOT / "tests" / "data" / "reply" / "zoo_failures.json").read_text("utf-8"))
REASONING, CONTENT = "Zq7 thinks it over:\nfirst <a>, then {b}.", 'Zq7 answers "yes"\n\nwith two paragraphs.'
CHAT = [{"role": "user", "content": "Hi"}]
TOKENIZER_TEMPLATES = (
    "llamacpp__Qwen-Qwen3-0.6B.jinja",  # free, <think>
    "llamacpp__Qwen3.5-4B.jinja",  # forced open
    "llamacpp__openai-gpt-oss-120b.jinja",  # markers of several special tokens
    "llamacpp__Kimi-K3.jinja",  # an end marker that opens the answer
    "mistralai__mistral-common__v15_think.jinja",  # an empty generation prompt: a pattern anchor
    "llamacpp__tencent-Hy3.jinja",  # closed by default
)


@dataclass(frozen=True)
class Trip:
    """One template's round trip under one reasoning intent."""

    caps: Caps
    prefix: str
    text: str
    end_of_turn: str | None
    reply: Reply
    rendered: bool
    """The turn's render holds the reasoning text at all."""

    @property
    def ok(self) -> bool:
        return (self.reply.reasoning_content, self.reply.content) == (REASONING, CONTENT)


def round_trip(template: ChatTemplate, intent: Intent) -> Trip | None:
    turn = [*CHAT, {"role": "assistant", "reasoning_content": REASONING, "content": CONTENT}]
    try:
        prompt = template.render(CHAT, reasoning=intent).prompt
        rendered = template.render(turn, reasoning=intent, add_generation_prompt=False).prompt
    except ChatcapsError:
        return None
    same = (at for at, (one, other) in enumerate(zip(prompt, rendered, strict=False)) if one != other)
    shared = next(same, min(len(prompt), len(rendered)))
    text = past_header(rendered[shared:], template.caps.generation_prompt)
    end_of_turn = end_of_turn_in(rendered, CONTENT)
    reply = parse_reply(text, template.caps, prefix=prompt, end_of_turn=end_of_turn)
    return Trip(template.caps, prompt, text, end_of_turn, reply, REASONING in rendered)


@pytest.fixture(scope="module")
def trips(zoo: tuple[ZooTemplate, ...]) -> dict[str, list[Trip]]:
    """Every zoo template with reasoning markers: its round trips (default state, then "on")."""
    found = {}
    for entry in zoo:
        template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
        if template.caps.reasoning.format == "none" or not template.caps.reasoning.end_marker:
            continue
        found[entry.file] = [trip for intent in (None, "on") if (trip := round_trip(template, intent))]
    return found


def test_round_trip_rate(trips: dict[str, list[Trip]]) -> None:
    failing = {file for file, tried in trips.items() if not any(trip.ok for trip in tried)}
    print(f"\n{len(trips) - len(failing)}/{len(trips)} templates with reasoning markers round-trip")
    assert sorted(failing) == sorted(FAILURES)
    unrendered = {file for file, tried in trips.items() if not any(trip.rendered for trip in tried)}
    assert {file for file in FAILURES if FAILURES[file].startswith("the turn's render drops")} == unrendered


def test_failures_are_in_the_docs() -> None:
    doc = (ROOT / "docs" / "reply.md").read_text("utf-8")
    assert [file for file in FAILURES if f"`{file}`" not in doc] == []


def test_stream_and_transformers_read_the_zoo_the_same(trips: dict[str, list[Trip]]) -> None:
    """One character at a time, the deltas merge into the batch result; `parse_response` on the exported template
    gives the same message."""
    for file, tried in trips.items():
        for trip in tried:
            stream = ReplyStream(trip.caps, prefix=trip.prefix, end_of_turn=trip.end_of_turn)
            deltas = stream.initial + [delta for char in trip.text for delta in stream.feed(char)] + stream.close()
            assert stream.reply == trip.reply, file
            merged = {key: "".join(delta.get(key, "") for delta in deltas) for key in ("reasoning_content", "content")}
            assert merged == {"reasoning_content": trip.reply.reasoning_content or "", "content": trip.reply.content}
            template = response_template(trip.caps, end_of_turn=trip.end_of_turn)
            message = parse_response(trip.text, template, prefix=trip.prefix)
            assert message.get("reasoning_content") == trip.reply.reasoning_content, file
            assert message.get("content", "") == trip.reply.content, file


@pytest.mark.parametrize("file", TOKENIZER_TEMPLATES)
def test_tokenizer_parse_response(file: str, trips: dict[str, list[Trip]]) -> None:
    """`tokenizer.response_template = response_template(caps)`: `parse_response` reads token ids of the zoo turn."""
    trip = next(trip for trip in trips[file] if trip.ok)
    markers = (trip.caps.reasoning.start_marker, trip.caps.reasoning.end_marker, trip.end_of_turn)
    tokenizer = byte_tokenizer("", ("<|endoftext|>",), tuple(marker for marker in markers if marker))
    tokenizer.response_template = response_template(trip.caps, end_of_turn=trip.end_of_turn)
    reply_ids = tokenizer.encode(trip.text, add_special_tokens=False)
    prompt_ids = tokenizer.encode(trip.prefix, add_special_tokens=False)
    expected: dict[str, Any] = {"role": "assistant", "reasoning_content": REASONING, "content": CONTENT}
    assert tokenizer.parse_response(reply_ids, prefix=prompt_ids) == expected


INTENTS: tuple[Intent, ...] = (None, "off", "on", "low", "high")
PROMPTS_WRITING_TEXT = {
    ("llamacpp__ByteDance-Seed-OSS.jinja", "off"): "a closed block with a budget reflection in it: read as reasoning",
    ("llamacpp__Kimi-K3.jinja", "off"): "the answer's opener <|open|>response<|sep|> without a think block: read as "
    "content (Caps name one-tag answer headers only)",
}
"""Prompts that write more of the message than reasoning markers, and how the reply then reads (docs/reply.md)."""


def test_every_prompt_holds_the_anchor(zoo: tuple[ZooTemplate, ...]) -> None:
    """Under every reasoning intent, the prompt holds the start anchor, and what follows it is the reasoning part the
    generation prompt (or a prefill) wrote: markers and whitespace only."""
    from chatcaps.reply.grammar import loaded

    odd = set()
    for entry in zoo:
        template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
        spec = loaded(template.caps)
        markers = [
            marker for marker in (template.caps.reasoning.start_marker, template.caps.reasoning.end_marker) if marker
        ]
        for intent in INTENTS:
            try:
                prompt = template.render(CHAT, reasoning=intent).prompt
            except ChatcapsError:
                continue
            rest = spec.truncate_past_last_anchor(prompt)
            for marker in markers:
                rest = rest.replace(marker, "")
            if spec.start_anchor_re.search(prompt) is None or rest.strip():
                odd.add((entry.file, intent))
    assert odd == set(PROMPTS_WRITING_TEXT)
