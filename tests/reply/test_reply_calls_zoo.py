"""Tool calls round-trip over the zoo: every template whose Caps hold a call format renders an assistant turn with
calls (and reasoning and content where it has them), and `parse_reply` reads the part the model would have written
back into the same calls.

The model's part is the turn's render past the longest prefix it shares with the prompt (backed off to the start of a
tag it cuts, and past the assistant header where a past turn's header is spaced otherwise than the generation
prompt's); the prefix is the prompt. A template passes a message when, under its default reasoning, "on" or
"off", the calls read back equal (names, and arguments equal as JSON values) and the content, where the turn
renders it, too. The rate per call format and every template that does not pass, with the reason, are in
tests/data/reply/calls_zoo_failures.json and docs/reply.md.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import ROOT
from test_reply_calls import merged_calls
from transformers.utils.chat_parsing import parse_response

from chatcaps import ChatTemplate, Reply, ReplyStream, parse_reply
from chatcaps.errors import ChatcapsError
from chatcaps.intent import Intent
from chatcaps.reply import response_template
from chatcaps.reply.calls import exportable
from chatcaps.zoo import ZooTemplate

FAILURES: dict[str, str] = json.loads(
    (ROOT / "tests" / "data" / "reply" / "calls_zoo_failures.json").read_text("utf-8")
)
CHAT = [{"role": "user", "content": "Hi"}]
TYPES = {"city": "string", "count": "integer", "ratio": "number", "flag": "boolean"}
TYPES |= {"tags": "array", "options": "object"}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The tool {name}.",
            "parameters": {
                "type": "object",
                "properties": {key: {"type": kind, "description": f"The {key}."} for key, kind in TYPES.items()},
            },
        },
    }
    for name in ("get_weather", "get_time", "send_mail")
]
REASONING, CONTENT = "Zq7 thinks about the tools.", "Zq7 calls two tools."
RICH: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": 'Zürich "old town"', "count": 3, "ratio": 2.5, "flag": True}),
    ("get_time", {"city": "東京, back\\slash", "tags": ["a", 1, None], "options": {"deep": {"x": [True]}}}),
]
"""The fixed message of the rate: two calls with every JSON type, quotes, a backslash and non-ASCII text."""


def message(calls: list[tuple[str, dict[str, Any]]], caps_reasoning: bool, content: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": f"Zq7Id{at:04d}", "type": "function", "function": {"name": name, "arguments": arguments}}
            for at, (name, arguments) in enumerate(calls)
        ],
    }
    return {**out, "reasoning_content": REASONING} if caps_reasoning else out


@dataclass(frozen=True)
class Trip:
    prefix: str
    text: str
    reply: Reply
    content: str | None
    """The content the turn renders, None where the turn does not render it."""
    calls: list[tuple[str, dict[str, Any]]]
    as_reasoning: bool = False
    """The turn renders its content inside the reasoning block (gpt-oss writes a tool-call turn's content to the
    analysis channel): it reads back as reasoning, a documented normalisation."""

    @property
    def ok(self) -> bool:
        read = [(call["function"]["name"], _loads(call["function"]["arguments"])) for call in self.reply.tool_calls]
        if not self.calls:  # a turn without calls: its content is the reasoning round trip's (test_reply_zoo.py)
            return read == []
        if self.as_reasoning:
            return read == self.calls and self.reply.reasoning_content == self.content
        return read == self.calls and (self.content is None or self.reply.content == self.content)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _cut(prompt: str, turn: str) -> int:
    """Where the turn leaves the prompt, not inside a tag (`<think>` against `<tool_call>` share `<t`)."""
    at = next((at for at, (one, other) in enumerate(zip(prompt, turn, strict=False)) if one != other), len(prompt))
    opening = turn.rfind("<", 0, at)
    return opening if opening > turn.rfind(">", 0, at) else at


def past_header(text: str, generation_prompt: str) -> str:
    """The model's part where a template writes other whitespace before a past turn's header than before the
    generation prompt's (`\n\n<|im_start|>assistant` against `<|im_start|>assistant`): past the header itself."""
    header = generation_prompt.lstrip()
    return text.lstrip()[len(header) :] if header and text.lstrip().startswith(header) else text


def trips(template: ChatTemplate, calls: list[tuple[str, dict[str, Any]]], content: str) -> list[Trip]:
    reasoning = template.caps.reasoning.format != "none"
    found = []
    intents: tuple[Intent, ...] = (None, "on", "off")
    for intent in intents:
        tried = intent
        turn_message = message(calls, reasoning and intent != "off", content)
        try:
            prompt = template.render(CHAT, tools=TOOLS, reasoning=tried).prompt
            turn = template.render([*CHAT, turn_message], tools=TOOLS, reasoning=tried, add_generation_prompt=False)
        except ChatcapsError:
            continue
        text = past_header(turn.prompt[_cut(prompt, turn.prompt) :], template.caps.generation_prompt)
        reply = parse_reply(text, template.caps, prefix=prompt, tools=TOOLS)
        shown = content if content and content in text else None
        start = template.caps.reasoning.start_marker
        as_reasoning = bool(shown and start and f"{start}{shown}" in text)
        found.append(Trip(prompt, text, reply, shown, calls, as_reasoning))
        if found[-1].ok:
            break
    return found


@pytest.fixture(scope="module")
def templates(zoo: tuple[ZooTemplate, ...]) -> dict[str, ChatTemplate]:
    """Every zoo template whose Caps hold a call format."""
    found = {}
    for entry in zoo:
        template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
        if template.caps.tools.call_format is not None:
            found[entry.file] = template
    return found


def _rich(template: ChatTemplate) -> list[tuple[str, dict[str, Any]]]:
    call_format = template.caps.tools.call_format
    return RICH if call_format is not None and call_format.separator is not None else RICH[:1]


def test_round_trip_rate(templates: dict[str, ChatTemplate]) -> None:
    failing = {
        file for file, template in templates.items() if not any(t.ok for t in trips(template, _rich(template), CONTENT))
    }
    rates: dict[str, list[int]] = {}
    for file, template in templates.items():
        call_format = template.caps.tools.call_format
        assert call_format is not None
        key = f"{call_format.shape} / {call_format.arguments}"
        rates.setdefault(key, [0, 0])
        rates[key][0] += file not in failing
        rates[key][1] += 1
    print(f"\n{len(templates) - len(failing)}/{len(templates)} templates with a call format round-trip")
    for key, (passed, total) in sorted(rates.items()):
        print(f"  {key}: {passed}/{total}")
    assert sorted(failing) == sorted(FAILURES)


def test_failures_are_in_the_docs() -> None:
    doc = (ROOT / "docs" / "reply.md").read_text("utf-8")
    assert [file for file in FAILURES if f"`{file}`" not in doc] == []


def test_stream_and_transformers_read_the_zoo_the_same(templates: dict[str, ChatTemplate]) -> None:
    """One character at a time, the deltas merge into the batch calls; `parse_response` on the exported template
    reads the same calls (its arguments a dict, typed from the tools)."""
    for file, template in templates.items():
        if file in FAILURES:
            continue
        trip = next(trip for trip in trips(template, _rich(template), CONTENT) if trip.ok)
        stream = ReplyStream(template.caps, prefix=trip.prefix, tools=TOOLS)
        deltas = stream.initial + [delta for char in trip.text for delta in stream.feed(char)] + stream.close()
        assert stream.reply == trip.reply, file
        assert merged_calls(deltas) == list(trip.reply.tool_calls), file
        tools: list[Any] = TOOLS
        call_format = template.caps.tools.call_format
        if call_format is not None and not exportable(call_format):
            continue  # transformers' format cannot express these: the exported template has no tool_calls field
        message = parse_response(trip.text, response_template(template.caps), prefix=trip.prefix, tools=tools)
        read = [(call["function"]["name"], call["function"]["arguments"]) for call in message.get("tool_calls", ())]
        assert len(read) == len(trip.calls), file
        pairs = zip(trip.calls, read, strict=True)
        expected = [(name, _as_exported(arguments, found)) for (name, arguments), (_, found) in pairs]
        assert read == expected, file


def _as_exported(arguments: dict[str, Any], exported: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the exported template reads them: an object or array the template wrote as a Python literal
    (`['a', 1, None]`) is read into JSON by chatcaps, kept as its text by transformers' typing."""
    return {
        key: exported[key]
        if isinstance(value, dict | list)
        and isinstance(exported.get(key), str)
        and ast.literal_eval(exported[key]) == value
        else value
        for key, value in arguments.items()
    }


NAMES = st.sampled_from([tool["function"]["name"] for tool in TOOLS])
TEXT = st.text(alphabet=st.sampled_from(list("abcXYZ 09\"'\\\n{},:é雪✓")), min_size=1, max_size=12).map(str.strip)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "city": TEXT.filter(bool),
    "count": st.integers(-1000, 1000),
    "ratio": st.floats(-100, 100, allow_nan=False).map(lambda value: round(value, 3)).filter(lambda v: v != int(v)),
    "flag": st.booleans(),
    "tags": st.lists(st.one_of(st.integers(0, 9), TEXT), max_size=3),
    "options": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9), max_size=2),
}
ARGUMENTS = st.dictionaries(st.sampled_from(sorted(VALUES)), st.none(), min_size=1, max_size=4).flatmap(
    lambda keys: st.fixed_dictionaries({key: VALUES[key] for key in keys})
)
CALLS = st.lists(st.tuples(NAMES, ARGUMENTS), min_size=0, max_size=3)


@settings(max_examples=30, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(calls=CALLS, content=st.sampled_from(["", CONTENT]))
def test_generated_messages_round_trip(
    templates: dict[str, ChatTemplate], calls: list[tuple[str, dict[str, Any]]], content: str
) -> None:
    """Hypothesis: 0-3 calls with generated arguments round-trip in every template that passes the rate's message
    and renders them exactly (`exact_values`), a template writing one call per turn given one."""
    for file, template in templates.items():
        call_format = template.caps.tools.call_format
        if file in FAILURES or call_format is None or not call_format.exact_values:
            continue
        tried = calls[:1] if call_format.separator is None else calls
        if not tried and not content:
            continue
        found = trips(template, tried, content)
        assert any(trip.ok for trip in found) or not found, (file, found[-1].text, found[-1].reply, found[-1].content)
