"""parse_output, the alias of parse_reply for a reasoning/content split: a reply read at the detected markers."""

from __future__ import annotations

import pytest

from chatcaps import ChatTemplate, ParsedOutput, parse_output

THINK = {"start": "<think>", "end": "</think>"}
TURNS = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{%- if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{%- endif %}"
    "{{ m.content }}<|im_end|>\n{%- endfor %}"
)
QWEN3_LIKE = (
    TURNS + ""
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}"
)
FORCED_OPEN = TURNS + "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{%- endif %}"


@pytest.mark.parametrize(
    ("text", "starts", "expected"),
    [
        ("<think>\nplan\n</think>\n\nAnswer.", False, ParsedOutput("Answer.", "plan")),
        ("  <think>plan</think>Answer.", False, ParsedOutput("Answer.", "plan")),
        ("Answer.", False, ParsedOutput("Answer.")),
        ("Answer with </think> inside.", False, ParsedOutput("Answer with </think> inside.")),
        ("Answer <think>x</think>", False, ParsedOutput("Answer <think>x</think>")),
        ("plan\n</think>\n\nAnswer.", True, ParsedOutput("Answer.", "plan")),
        ("still thinking", True, ParsedOutput("", "still thinking", reasoning_finished=False)),
        ("<think>still", False, ParsedOutput("", "still", reasoning_finished=False)),
    ],
)
def test_split_at_markers(text: str, starts: bool, expected: ParsedOutput) -> None:
    assert parse_output(text, THINK, starts) == expected


GPT_OSS = {"start": "<|channel|>analysis<|message|>", "end": "<|end|>"}
FINAL = "<|start|>assistant<|channel|>final<|message|>"


@pytest.mark.parametrize(
    ("text", "markers", "starts", "expected"),
    [
        pytest.param("Answer. \n", THINK, False, ParsedOutput("Answer."), id="trailing whitespace is layout"),
        pytest.param(" x\n", {"start": None, "end": None}, False, ParsedOutput("x"), id="without markers too"),
        pytest.param("<think></think>Answer.", THINK, False, ParsedOutput("Answer."), id="an empty block is None"),
        pytest.param("</think>Answer.", THINK, False, ParsedOutput("Answer."), id="a lone end marker, an empty block"),
        pytest.param("<think>\nplan</think>A", THINK, True, ParsedOutput("A", "plan"), id="a repeated start marker"),
        pytest.param(FINAL + "Answer.", GPT_OSS, False, ParsedOutput("Answer."), id="a header without reasoning"),
        pytest.param("", {"start": None, "end": "</think>"}, True, ParsedOutput(""), id="nothing in an opened block"),
    ],
)
def test_read_as_parse_reply_reads_it(
    text: str, markers: dict[str, str | None], starts: bool, expected: ParsedOutput
) -> None:
    """Where the earlier splitter read a text differently, `parse_reply`'s reading (docs/reply.md, "parse_output")."""
    assert parse_output(text, markers, starts, content_headers=(FINAL,)) == expected


def test_no_markers_means_all_content() -> None:
    assert parse_output("<think>x</think>y", {"start": None, "end": None}, True) == ParsedOutput("<think>x</think>y")


def test_multi_token_end_marker() -> None:
    markers = {"start": "<|channel|>analysis<|message|>", "end": "<|end|><|start|>assistant<|channel|>final<|message|>"}
    text = "plan<|end|><|start|>assistant<|channel|>final<|message|>Answer."
    assert parse_output(text, markers, True) == ParsedOutput("Answer.", "plan")


def test_a_content_header_after_the_end_marker_is_not_content() -> None:
    """Channel-style Caps (gpt-oss): the end marker is the channel's end and the final channel's header follows."""
    markers = {"start": "<|channel|>analysis<|message|>", "end": "<|end|>"}
    headers = ("<|start|>assistant<|channel|>final<|message|>",)
    text = "<|channel|>analysis<|message|>plan<|end|><|start|>assistant<|channel|>final<|message|>Answer."
    assert parse_output(text, markers, content_headers=headers) == ParsedOutput("Answer.", "plan")
    assert parse_output(text, markers) == ParsedOutput("<|start|>assistant<|channel|>final<|message|>Answer.", "plan")


def test_to_message() -> None:
    assert ParsedOutput("A", "r").to_message() == {"role": "assistant", "content": "A", "reasoning_content": "r"}
    assert ParsedOutput("A").to_message() == {"role": "assistant", "content": "A"}


def test_render_result_parses_with_its_own_state() -> None:
    """A forced-open prompt starts the reply inside reasoning; a closed prefill ("off") does not."""
    chat = [{"role": "user", "content": "Hi"}]
    opened = ChatTemplate.from_str(FORCED_OPEN).render(chat)
    assert opened.starts_in_reasoning
    assert opened.parse_output("plan</think>Hello") == ParsedOutput("Hello", "plan")
    closed = ChatTemplate.from_str(QWEN3_LIKE).render(chat, reasoning="off")
    assert closed.prompt.endswith("assistant<think>\n\n</think>")
    assert not closed.starts_in_reasoning
    assert closed.parse_output("Hello") == ParsedOutput("Hello")
    assert ChatTemplate.from_str(QWEN3_LIKE).caps.reasoning.end_marker == "</think>"
