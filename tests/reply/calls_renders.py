"""The model's text of a turn of calls, as each zoo template renders it after its own prompt: what the grammar tests
judge (tests/reply/test_constraint_zoo.py with llama.cpp's engine and llguidance, tests/integrations/test_vllm_plugin.py
with xgrammar). No engine is imported here: vLLM's venv has none of llama.cpp's."""

from __future__ import annotations

import re
from collections.abc import Iterator

from test_reply_calls_zoo import CHAT, RICH, TOOLS, _cut, message, past_header

from chatcaps import ChatTemplate
from chatcaps.caps import CallFormat
from chatcaps.errors import ChatcapsError
from chatcaps.intent import Intent

INTENTS: tuple[Intent, ...] = (None, "on", "off")
STOP = re.compile(r"<[^<>\s]+>|\[[A-Z_]+\]")
"""A marker-like text: the end of turn's last one is the model's stop token."""


def opening(calls: CallFormat) -> str:
    """The literal text a turn's calls open with: the list's opener, else the first call's text before its name."""
    return calls.begin.strip() or calls.call.strip().split("${")[0]


def model_text(template: ChatTemplate, prompt: str, text: str, eos: str) -> str:
    """What the model writes of the turn: its render past the prompt, less a reasoning block the prompt closed (the
    turn renders it again; the model writes what follows its end marker), less the turn's end, which the model writes
    as its stop token: the end of turn, its last marker alone (Command R ends a turn of calls with
    `<|END_OF_TURN_TOKEN|>` only) or the end of sequence, at its last place (the end-of-turn text may also open a
    call or close the reasoning inside the turn)."""
    calls = template.caps.tools.call_format
    end = template.caps.reasoning.end_marker
    closed = end and prompt.rstrip().endswith(end.strip()) and end in text
    if calls is not None and end and closed and opening(calls) not in text[: text.index(end)]:
        text = text[text.index(end) + len(end) :]
    eot = template.caps.end_of_turn or ""
    stop = next((stop for stop in (eot, *STOP.findall(eot)[-1:], eos) if stop and stop in text), "")
    return (text[: text.rindex(stop)] if stop else text).rstrip()


def renders(template: ChatTemplate, eos: str) -> Iterator[tuple[str, str]]:
    """Each prompt and the model's text of the calls after it: under each reasoning intent, the calls-only message
    with content None (OpenAI's) and "" (for a template that writes no calls without text), with its reasoning where
    the template has some and the intent is not "off"."""
    call_format = template.caps.tools.call_format
    calls = RICH if call_format is not None and call_format.separator is not None else RICH[:1]
    reasoning = template.caps.reasoning.format != "none"
    for intent in INTENTS:
        try:
            prompt = template.render(CHAT, tools=TOOLS, reasoning=intent).prompt
        except ChatcapsError:
            continue
        for content in (None, ""):
            turn_message = {**message(calls, reasoning and intent != "off", ""), "content": content}
            try:
                turn = template.render(
                    [*CHAT, turn_message], tools=TOOLS, reasoning=intent, add_generation_prompt=False
                ).prompt
            except ChatcapsError:
                continue
            text = past_header(turn[_cut(prompt, turn) :], template.caps.generation_prompt)
            yield prompt, model_text(template, prompt, text, eos)
