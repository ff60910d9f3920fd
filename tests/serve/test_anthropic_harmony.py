"""Harmony's analysis channel (gpt-oss's raw chain of thought) never reaches a client as content, on either API, in
either `--reasoning` mode, however the model writes it: streamed a character at a time or in larger pieces, cut off
inside the channel or inside its end marker, channels out of order (final before analysis, a commentary preamble, a
second analysis after the answer or after a call). With `--reasoning hide` it reaches the client nowhere at all,
only its token count. `reasoning_format: "none"`, which would answer the channels as content, is refused.

The backend is scripted (it "generates" a fixed text in pieces) over the gpt-oss template of the zoo, so every way
of writing the channels is tried exactly."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from serve_harness import serving

from chatcaps import ChatTemplate
from chatcaps.serve.app import create_app
from chatcaps.serve.request import GenerationEnd, Sampling
from chatcaps.serve.visibility import Visibility
from chatcaps.zoo import ZooTemplate

SECRET = "SECRET"
"""The word every analysis channel holds, and no other text."""
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris"}<|call|>'
)
CASES: dict[str, str] = {
    "analysis then final": f"<|channel|>analysis<|message|>{SECRET} plan.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
    "cut off inside the analysis": f"<|channel|>analysis<|message|>{SECRET} still thinking",
    "cut off inside its end marker": f"<|channel|>analysis<|message|>{SECRET} plan.<|en",
    "final before analysis": f"<|channel|>final<|message|>Hello!<|end|>"
    f"<|start|>assistant<|channel|>analysis<|message|>{SECRET} after.<|end|>",
    "a preamble, analysis, final": "<|channel|>commentary<|message|>Checking.<|end|>"
    f"<|start|>assistant<|channel|>analysis<|message|>{SECRET} more.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Sunny.<|return|>",
    "final between two analyses": f"<|channel|>analysis<|message|>{SECRET} one.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>A.<|end|>"
    f"<|start|>assistant<|channel|>analysis<|message|>{SECRET} two.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>B.<|return|>",
    "analysis before a call": f"<|channel|>analysis<|message|>{SECRET} call it.<|end|>{CALL}",
    "analysis after the end of turn": "<|channel|>final<|message|>Hello!<|return|>"
    f"<|start|>assistant<|channel|>analysis<|message|>{SECRET} late.<|end|>",
    "analysis not closed before the final header": f"<|channel|>analysis<|message|>{SECRET} short."
    "<|start|>assistant<|channel|>final<|message|>Done.<|return|>",
}
LEFT_OUT = frozenset({"analysis after the end of turn"})
"""Cases whose analysis is not part of the message (the report's warning quotes it, but under hide)."""
TOOLS_OPENAI: list[Any] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}},
    }
]
TOOLS_ANTHROPIC: list[Any] = [{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}]


class _Scripted:
    """gpt-oss's template, and a generation that writes the text the request's `max_tokens` selects (its index in
    `CASES`), `size` characters at a time; a token is a character."""

    model = "scripted"
    grammars: str | None = None
    lazy_grammars = False

    def __init__(self, template: ChatTemplate) -> None:
        self._template = template
        self.size = 1

    def template(self, *, tools: bool) -> ChatTemplate:
        return self._template

    def check(self, sampling: Sampling) -> None:
        return None

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        text = list(CASES.values())[(sampling.max_tokens or 1) - 1]
        for at in range(0, len(text), self.size):
            yield text[at : at + self.size]
        yield GenerationEnd(len(prompt), len(text), "stop")

    async def count_tokens(self, text: str) -> int:
        return len(text)

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def backend(zoo: tuple[ZooTemplate, ...]) -> _Scripted:
    entry = next(entry for entry in zoo if entry.file == "llamacpp__openai-gpt-oss-120b.jinja")
    template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
    assert template.caps.reasoning.channel_style
    return _Scripted(template)


@pytest.fixture(scope="module", params=["show", "hide"])
def served(request: pytest.FixtureRequest, backend: _Scripted) -> Iterator[tuple[str, Visibility]]:
    with serving(create_app(backend, reasoning=request.param)) as base:
        yield base, request.param


def _openai(base: str, case: int, stream: bool) -> tuple[str, list[str], str]:
    """The raw answer, the content the client reads from it, and the reasoning (merged, where streamed)."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "tools": TOOLS_OPENAI, "max_tokens": case}
    if not stream:
        response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        return response.text, [message["content"] or ""], message.get("reasoning_content") or ""
    with httpx.stream("POST", f"{base}/v1/chat/completions", json={**body, "stream": True}, timeout=30) as response:
        raw = response.read().decode()
    assert response.status_code == 200 and '"error"' not in raw, raw
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    calls = [call.get("function", {}).get("arguments", "") for delta in deltas for call in delta.get("tool_calls", ())]
    content = [delta.get("content") or "" for delta in deltas] + calls
    return raw, content, "".join(delta.get("reasoning_content", "") for delta in deltas)


def _anthropic(base: str, case: int, stream: bool) -> tuple[str, list[str], str]:
    """The raw answer, the text and tool input the client reads from it, and the thinking (merged, where streamed)."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "tools": TOOLS_ANTHROPIC, "max_tokens": case}
    if not stream:
        response = httpx.post(f"{base}/v1/messages", json=body, timeout=30)
        assert response.status_code == 200, response.text
        blocks = response.json()["content"]
        content = [block.get("text", json.dumps(block.get("input"))) for block in blocks if block["type"] != "thinking"]
        return response.text, content, "".join(block.get("thinking", "") for block in blocks)
    with httpx.stream("POST", f"{base}/v1/messages", json={**body, "stream": True}, timeout=30) as response:
        raw = response.read().decode()
    assert response.status_code == 200 and "event: error" not in raw, raw
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]
    deltas = [event["delta"] for event in events if event["type"] == "content_block_delta"]
    content = [delta.get("text", delta.get("partial_json", "")) for delta in deltas]
    return raw, content, "".join(delta.get("thinking", "") for delta in deltas)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("size", [0, 1, 7], ids=["whole", "stream-1", "stream-7"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_analysis_channel_is_never_content(
    served: tuple[str, Visibility], backend: _Scripted, api: str, size: int, case: str
) -> None:
    base, reasoning = served
    backend.size = size or 1
    read = _openai if api == "openai" else _anthropic
    raw, content, thought = read(base, list(CASES).index(case) + 1, bool(size))
    assert SECRET not in "".join(content)
    assert "<|channel|>" not in "".join(content)
    if reasoning == "hide":
        assert (thought, SECRET in raw) == ("", False)
    else:
        assert (SECRET in thought) is (case not in LEFT_OUT)


def test_raw_reasoning_is_refused_for_a_channel_template(served: tuple[str, Visibility]) -> None:
    base, _ = served
    body = {"messages": [{"role": "user", "content": "Hi"}], "reasoning_format": "none", "max_tokens": 1}
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert (response.status_code, response.json()["error"]["message"]) == (
        400,
        "request.reasoning_format 'none' is refused: the template writes its reasoning in an analysis channel, "
        "which is never answered as content",
    )
