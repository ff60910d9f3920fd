"""Answer headers are grammar, raw or not, and a tool-call turn that ends with part of the end of turn ends there:
the probe templates of tests/data/probe_templates.json, read in one go and one character at a time."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import DATA
from test_reply_calls import merged_calls

from chatcaps import ChatTemplate, RenderResult, Reply
from chatcaps.reply import response_template

TEMPLATES: dict[str, Any] = json.loads((DATA / "probe_templates.json").read_text("utf-8"))
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
CALLS = '<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="f"<|sep|>{"a": 1}<|close|>call<|sep|>'
"""A call as the Kimi-like probe template writes it, after the answer: the response block closed, the tools opened."""
CALL = {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


def render(name: str, **options: Any) -> RenderResult:
    return ChatTemplate(TEMPLATES[name]["template"]).render([{"role": "user", "content": "Hi"}], **options)


def read(result: RenderResult, text: str, *, raw: bool) -> Reply:
    """The reply in one go, checked against the stream fed one character at a time (deltas merged into it)."""
    reply = result.parse_reply(text, raw=raw)
    stream = result.reply_stream(raw=raw)
    deltas = [*stream.initial, *(delta for char in text for delta in stream.feed(char)), *stream.close()]
    assert stream.reply == reply
    assert "".join(delta.get("content", "") for delta in deltas) == reply.content
    assert merged_calls(deltas) == list(reply.tool_calls)
    return reply


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("<|START_RESPONSE|>Paris.<|END_RESPONSE|>", "Paris."),
        (
            "<|START_THINKING|>Plan.<|END_THINKING|><|START_RESPONSE|>Paris.<|END_RESPONSE|>",
            "<|START_THINKING|>Plan.<|END_THINKING|>Paris.",
        ),
    ],
)
def test_raw_keeps_the_reasoning_as_written_and_takes_the_header_out(text: str, content: str) -> None:
    assert read(render("answer_wrapper_beside_calls"), text, raw=True) == Reply(content)


@pytest.mark.parametrize("raw", [False, True])
def test_a_word_header_is_grammar_only_where_the_message_starts(raw: bool) -> None:
    result = render("answer_word_header", tools=TOOLS)
    assert result.prompt.endswith(">>>")
    assert read(result, "all\nParis is sunny.", raw=raw) == Reply("Paris is sunny.")
    assert read(result, "Sunny, all\nday.", raw=raw) == Reply("Sunny, all\nday.")
    assert read(result, 'f\n{"a": 1}', raw=raw) == Reply("", tool_calls=(CALL,))
    fields = response_template(result.caps)["fields"]
    assert fields["content_header"] == {"open_pattern": "\\A\\s*all\\\n", "close_pattern": r"(?=[\s\S])"}


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_the_answers_opening_is_grammar_where_the_model_skips_its_thinking(tools: list[dict[str, Any]] | None) -> None:
    """The prompt opened the think block and the model writes the answer's opening at once: the block is empty and
    closed there (with tools, where a call's opening may end the block too, without a warning). Raw: the header the
    end marker ends with is taken out, the rest of the end marker stays as written."""
    result = render("answer_opening_where_reasoning_is_off", tools=tools)
    assert result.prompt.endswith("<|open|>think<|sep|>")
    text = "<|open|>response<|sep|>Paris.<|close|>response<|sep|><|close|>message<|sep|>"
    assert read(result, text, raw=False) == Reply("Paris.")
    assert read(result, text, raw=True) == Reply("Paris.")
    if tools:
        calls = f"{CALLS}<|close|>tools<|sep|><|close|>message<|sep|>"
        assert read(result, f"<|open|>response<|sep|>{calls}", raw=False) == Reply("", tool_calls=(CALL,))
    later = "Plan <|open|>response<|sep|>Paris."  # a header later in the block is reasoning text, as any marker
    assert read(result, later, raw=False).reasoning_content == "Plan <|open|>response<|sep|>Paris."
    thought = "Plan.<|close|>think<|sep|><|open|>response<|sep|>Paris.<|close|>response<|sep|>"
    assert read(result, thought, raw=True) == Reply("Plan.<|close|>think<|sep|>Paris.")
    assert read(result, thought, raw=False) == Reply("Paris.", "Plan.")
    # The end marker less the header it ends with closes the block, as does the header right where it opens; the
    # header opens the answer's field either way.
    fields = response_template(result.caps)["fields"]
    header = r"<\|open\|>response<\|sep\|>"
    assert fields["reasoning_content"]["close_pattern"] == (
        rf"<\|close\|>think<\|sep\|>|(?=\s*(?:{header}))(?<=\A\s*(?:<\|open\|>think<\|sep\|>\s*)*)\s*(?:{header})"
    )
    assert fields["content_header"] == {"open_pattern": header, "close_pattern": r"(?=[\s\S])"}


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("eos", ["<|close|>message<|sep|>", "<|close|>message"])
def test_a_tool_call_turn_ends_with_the_rest_of_the_end_of_turn(raw: bool, eos: str) -> None:
    """The turn closes its answer's block before the calls (`<|close|>response<|sep|>`, the end of turn's head), so
    it ends `<|close|>tools<|sep|><|close|>message<|sep|>`, or without its last marker where a server strips it."""
    result = render("answer_opening_where_reasoning_is_off", tools=TOOLS)
    text = f"Plan.<|close|>think<|sep|><|open|>response<|sep|>On it.{CALLS}<|close|>tools<|sep|>{eos}"
    expected = (
        Reply("Plan.<|close|>think<|sep|>On it.", tool_calls=(CALL,)) if raw else Reply("On it.", "Plan.", (CALL,))
    )
    assert read(result, text, raw=raw) == expected
    if eos.endswith("<|sep|>"):  # the whole end: what follows it is no part of the message
        after = read(result, f"{text}Later.", raw=raw)
        assert (after.content, after.warnings) == (
            expected.content,
            ("text after the end of turn, not part of the message: 'Later.'",),
        )


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("<|CHATBOT_TOKEN|>Paris.<|END_OF_TURN_TOKEN|>", "Paris."),
        ("\n<|CHATBOT_TOKEN|>\nParis.", "Paris."),
        ("<|CHAT", "<|CHAT"),
        ("<|CHATTY|>Paris.", "<|CHATTY|>Paris."),
        ("Paris. <|CHATBOT_TOKEN|>", "Paris. <|CHATBOT_TOKEN|>"),
    ],
)
def test_the_prompts_last_tag_written_again_first_is_grammar(text: str, content: str, raw: bool) -> None:
    result = render("role_tag_prompt")
    assert result.prompt.endswith("<|CHATBOT_TOKEN|>")
    reply = read(result, text, raw=raw)
    assert reply.content == content
    repeated = ["the reply starts with the generation prompt's last tag again, read as grammar: '<|CHATBOT_TOKEN|>'"]
    assert [w for w in reply.warnings if "last tag" in w] == (repeated if content == "Paris." else [])
