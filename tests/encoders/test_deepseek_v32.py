# ruff: noqa: RUF001 -- the format's own tokens are written with FULLWIDTH VERTICAL LINE (U+FF5C)
"""DeepSeek-V3.2's encoder against the reference's vectors: every prompt equal, every refusal a refusal; the reply side
reads every well-formed reply to the reference's message and keeps the text of those the reference refuses.

The vectors are `deepseek-v3.2/cases.json` under `CHATCAPS_ENCODERS` (default: `../shared/encoders` beside the
repository), never copied here: their README says how they were made.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT

from chatcaps import ChatTemplate
from chatcaps.cli import main
from chatcaps.encoders import deepseek_v32, encoder
from chatcaps.errors import InputError

CASES = Path(os.environ.get("CHATCAPS_ENCODERS", ROOT.parent / "shared" / "encoders")) / "deepseek-v3.2" / "cases.json"
VECTORS: dict[str, Any] = json.loads(CASES.read_text("utf-8")) if CASES.is_file() else {"encode": [], "parse": []}
needs_vectors = pytest.mark.skipif(not CASES.is_file(), reason=f"no reference vectors at {CASES} (CHATCAPS_ENCODERS)")
TEMPLATE = ChatTemplate.from_encoder("deepseek-v3.2")
ASKED = [{"role": "user", "content": "Weather in Paris?"}]


def _label(case: dict[str, Any]) -> str:
    return f"{case['name']}-{case['thinking_mode']}-{case.get('drop_thinking', '')}"


@needs_vectors
def test_the_vectors_are_all_there() -> None:
    assert (len(VECTORS["encode"]), len(VECTORS["parse"])) == (42, 11)


@needs_vectors
@pytest.mark.parametrize("case", VECTORS["encode"], ids=_label)
def test_encode_equals_the_reference(case: dict[str, Any]) -> None:
    thinking = case["thinking_mode"] == "thinking"
    if "prompt" in case:
        assert deepseek_v32.encode(case["messages"], thinking=thinking) == case["prompt"]
    else:
        with pytest.raises(InputError):
            deepseek_v32.encode(case["messages"], thinking=thinking)


def _message(text: str, thinking: bool) -> dict[str, Any]:
    """The reply to a one-turn prompt as the reference writes a message (no call ids, "" for what is absent)."""
    reply = TEMPLATE.render(ASKED, reasoning="on" if thinking else "off").parse_reply(text)
    calls = [{"type": call["type"], "function": call["function"]} for call in reply.tool_calls]
    return {"role": "assistant", "content": reply.content, "reasoning_content": reply.reasoning_content or ""} | {
        "tool_calls": calls
    }


@needs_vectors
@pytest.mark.parametrize("case", VECTORS["parse"], ids=_label)
def test_replies_read_as_the_reference_reads_them(case: dict[str, Any]) -> None:
    thinking = case["thinking_mode"] == "thinking"
    message = _message(case["text"], thinking)
    if "message" in case:
        assert message == case["message"]
    else:  # the reference raises; the text is kept, whole, as content or reasoning
        kept = message["reasoning_content"] + message["content"]
        assert kept and kept in case["text"].removesuffix(deepseek_v32.EOS)


def test_request_tools_become_a_system_message_at_index_0() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    prompt = TEMPLATE.render_raw(ASKED, tools=tools)
    expected = deepseek_v32.encode([{"role": "system", "content": "", "tools": tools}, *ASKED], thinking=False)
    assert prompt == expected == deepseek_v32.encode(ASKED, thinking=False, tools=tools)


def test_errors_name_the_callers_message() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(InputError) as raised:
        TEMPLATE.render_raw([*ASKED, {"role": "tool", "content": "x"}], tools=tools)
    assert (raised.value.index, raised.value.field) == (1, "role")
    assert str(raised.value) == "messages[1].role: a tool result must follow an assistant message with tool_calls"


def test_thinking_is_the_declared_reasoning_control() -> None:
    [control] = TEMPLATE.caps.reasoning.controls
    assert (control.name, control.role, control.values, control.declared) == ("thinking", "toggle", (False, True), True)
    on = TEMPLATE.render(ASKED, reasoning="on")
    assert (on.template_kwargs["thinking"], on.prompt, on.starts_in_reasoning) == (
        True,
        "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜><think>",
        True,
    )


def test_a_model_folder_with_the_encoder_file_uses_it(tmp_path: Path) -> None:
    (tmp_path / "encoding").mkdir()
    (tmp_path / "encoding" / "encoding_dsv32.py").write_text("# the vendor's encoder\n")
    template = ChatTemplate.from_dir(tmp_path)
    assert (template.engine, template.source.name) == ("encoder", "deepseek-v3.2")
    assert template.render_raw(ASKED) == TEMPLATE.render_raw(ASKED)


def test_unknown_encoder() -> None:
    with pytest.raises(
        InputError, match=r"unknown encoder 'gpt-9'; the encoders are \['deepseek-v3.2'(\]|, 'mistral-)"
    ):
        encoder("gpt-9")


def test_cli_renders_the_encoder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(ASKED))
    assert main(["render", "--encoder", "deepseek-v3.2", "--messages", str(messages), "--reasoning", "on"]) == 0
    assert capsys.readouterr().out == "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris?<｜Assistant｜><think>\n"


def _streamed(text: str, thinking: bool) -> dict[str, Any]:
    """`_message` read from the reply stream, fed a character at a time: the deltas joined."""
    stream = TEMPLATE.render(ASKED, reasoning="on" if thinking else "off").reply_stream()
    deltas = [*stream.initial, *(delta for char in text for delta in stream.feed(char)), *stream.close()]
    joined: dict[str, str] = {"content": "", "reasoning_content": ""}
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        for key in joined:
            joined[key] += delta.get(key) or ""
        for call in delta.get("tool_calls") or ():
            function = calls.setdefault(call["index"], {"type": "function", "function": {"name": "", "arguments": ""}})
            function["function"]["name"] += call.get("function", {}).get("name") or ""
            function["function"]["arguments"] += call.get("function", {}).get("arguments") or ""
    return {"role": "assistant", **joined, "tool_calls": [calls[index] for index in sorted(calls)]}


@needs_vectors
@pytest.mark.parametrize("case", [case for case in VECTORS["parse"] if "message" in case], ids=_label)
def test_the_reply_stream_reads_as_the_reference(case: dict[str, Any]) -> None:
    assert _streamed(case["text"], case["thinking_mode"] == "thinking") == case["message"]


def test_serve_takes_the_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """`chatcaps serve --encoder deepseek-v3.2` renders with the encoder, as detect and render do."""
    pytest.importorskip("starlette", reason="chatcaps serve needs the serve extra")
    import chatcaps.serve
    from chatcaps.serve.upstream import UpstreamBackend, Waiting

    served: list[Any] = []
    monkeypatch.setattr(chatcaps.serve, "run", lambda backend, **options: served.append(backend))
    monkeypatch.delenv("CHATCAPS_API_KEY", raising=False)
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--encoder", "deepseek-v3.2"]) == 0
    (backend,) = served
    assert isinstance(backend, UpstreamBackend) and isinstance(backend.client, Waiting)
    template = backend.client.template
    assert (template.engine, template.render_raw(ASKED)) == ("encoder", TEMPLATE.render_raw(ASKED))


@needs_vectors
def test_a_served_reply_reads_as_the_reference_reads_it() -> None:
    """The server in front of a model that writes the reference's typed DSML call (thinking on): the `openai`
    client gets the reference's reasoning and call, whole and streamed."""
    pytest.importorskip("starlette", reason="chatcaps serve needs the serve extra")
    from openai import OpenAI
    from serve_harness import Canned, serving

    from chatcaps.serve.app import create_app

    (case,) = [case for case in VECTORS["parse"] if case["name"] == "one_call_typed" and "message" in case]

    class Writes(Canned):
        def template(self, *, tools: bool) -> ChatTemplate:
            return TEMPLATE

        async def generate(self, prompt: str, sampling: Any) -> Any:
            from chatcaps.serve.request import GenerationEnd

            text = case["text"].removesuffix(deepseek_v32.EOS)
            for at in range(0, len(text), 7):
                yield text[at : at + 7]
            yield GenerationEnd(len(prompt), len(text), "stop")

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body: dict[str, Any] = {"model": "m", "messages": ASKED, "tools": tools, "reasoning_effort": "high"}
    with serving(create_app(Writes())) as base:
        client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        message = client.chat.completions.create(**body).choices[0].message
        chunks = list(client.chat.completions.create(**body, stream=True))
    want = case["message"]
    assert (message.model_extra or {}).get("reasoning_content") == want["reasoning_content"]
    calls = [{"name": call.function.name, "arguments": call.function.arguments} for call in message.tool_calls or ()]
    assert calls == [call["function"] for call in want["tool_calls"]]
    streamed = "".join(
        piece.function.arguments or ""
        for chunk in chunks
        for choice in chunk.choices
        for piece in choice.delta.tool_calls or ()
        if piece.function is not None
    )
    assert streamed == want["tool_calls"][0]["function"]["arguments"]
