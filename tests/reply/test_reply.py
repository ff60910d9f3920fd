"""The reply side: the grammar exported as a transformers `response_template`, `parse_reply` on bad output as well as
good (tests/data/reply/malformed.json), streaming equal to batch for any chunking, and `tokenizer.parse_response`
working with the exported template on a real tokenizer."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import ROOT
from transformers.utils.chat_parsing import parse_response
from transformers.utils.chat_parsing.response_templates import load_response_template

from chatcaps import ChatTemplate, Reply, ReplyStream, parse_reply
from chatcaps.caps import Caps, Reasoning, State
from chatcaps.reply import end_of_turn_in, response_template
from chatcaps.zoo import ZooTemplate

CASES: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "reply" / "malformed.json").read_text("utf-8"))
START, END, TURN_END = CASES["start_marker"], CASES["end_marker"], CASES["end_of_turn"]
PROMPTS: dict[str, str] = CASES["generation_prompts"]
TINY_TEMPLATE = (ROOT / "tests" / "data" / "tiny_model" / "chat_template.jinja").read_text("utf-8")
HISTORY = "<|im_start|>user\nHi<|im_end|>\n"


def caps_for(state: State, *, start: str | None = START, end: str | None = END, prompt: str | None = None) -> Caps:
    """Caps as detection writes them for a Qwen3-like template whose generation prompt leaves `state`."""
    reasoning = Reasoning(format="reasoning_content", start_marker=start, end_marker=end, default_state=state)
    return Caps("", "jinja2", reasoning=reasoning, generation_prompt=PROMPTS[state] if prompt is None else prompt)


def streamed(caps: Caps, prefix: str, chunks: list[str], end_of_turn: str | None = TURN_END) -> tuple[Reply, str, str]:
    """The stream's Reply and its deltas merged: (reply, reasoning text, content text)."""
    stream = ReplyStream(caps, prefix=prefix, end_of_turn=end_of_turn)
    deltas = list(stream.initial)
    for chunk in chunks:
        deltas += stream.feed(chunk)
    deltas += stream.close()
    for delta in deltas:
        assert len(delta) == 1 and next(iter(delta.values())), delta
    merged = {field: "".join(delta.get(field, "") for delta in deltas) for field in ("reasoning_content", "content")}
    return stream.reply, merged["reasoning_content"], merged["content"]


def assert_same_as_batch(caps: Caps, prefix: str, chunks: list[str], end_of_turn: str | None = TURN_END) -> None:
    batch = parse_reply("".join(chunks), caps, prefix=prefix, end_of_turn=end_of_turn)
    reply, reasoning, content = streamed(caps, prefix, chunks, end_of_turn)
    assert reply == batch
    assert (reasoning, content) == (batch.reasoning_content or "", batch.content)


# --- the grammar ------------------------------------------------------------------------------------------------


def test_template_for_a_free_template() -> None:
    assert response_template(caps_for("free"), end_of_turn=TURN_END) == {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "reasoning_content": {
                "open_pattern": r"\A\s*(?:(?:<think>\s*)+(?P<more>(?=<(?:t(?:h(?:i(?:n(?:k)?)?)?)?)?\Z))?"
                r"|(?=</think>))",
                "close": "</think>",
                "content": "text",
                "transform": "{content}",
            },
            "content": {"content": "text"},
            "after_end_of_turn": {"open": "<|im_end|>", "content": "text"},
        },
    }


@pytest.mark.parametrize(
    ("prompt", "anchor"),
    [
        ("<|im_start|>assistant\n<think>\n", {"start_anchor": "<|im_start|>assistant\n"}),  # forced open
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", {"start_anchor": "<|im_start|>assistant\n"}),  # closed
        ("<|Assistant|></think>", {"start_anchor": "<|Assistant|>"}),  # closed by a lone end marker, as DeepSeek V3.1
        ("", {"start_anchor_pattern": r"\A(?:(?!(?:<think>\s*(?:</think>\s*)?|</think>\s*)\Z).)*"}),
    ],
)
def test_anchor_is_the_generation_prompt_before_its_reasoning_part(prompt: str, anchor: dict[str, str]) -> None:
    template = response_template(caps_for("free", prompt=prompt))
    assert {key: template[key] for key in template if key.startswith("start_anchor")} == anchor


@pytest.mark.parametrize(
    ("prompt", "kept"),
    [
        ("[INST]Hi[/INST]", ""),
        ("[INST]Hi[/INST]<think>\n", "<think>\n"),
        ("[INST]Hi[/INST]<think>\n\n</think>\n\n", "<think>\n\n</think>\n\n"),
        ("[INST]Hi[/INST]</think>", "</think>"),
        ("<think>\n", "<think>\n"),
    ],
)
def test_an_empty_generation_prompt_keeps_the_reasoning_part_a_prompt_ends_with(prompt: str, kept: str) -> None:
    """transformers cuts the prefix past the anchor and reads the rest as the message's start."""
    template = load_response_template(response_template(caps_for("free", prompt="")))
    assert template.truncate_past_last_anchor(prompt) == kept


def test_no_markers_means_content_only() -> None:
    caps = Caps("", "jinja2", generation_prompt="<|assistant|>\n")
    assert response_template(caps) == {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|assistant|>\n",
        "fields": {"content": {"content": "text"}},
    }
    assert parse_reply("<think>x</think>y", caps) == Reply("<think>x</think>y")


def test_no_start_marker_means_the_reply_starts_in_reasoning() -> None:
    """Apriel's template writes reasoning with only an end marker after a prompt that opens it in words."""
    prompt = "\n<|begin_assistant|>\nHere are my reasoning steps:\n"
    caps = caps_for("free", start=None, end="[BEGIN FINAL RESPONSE]", prompt=prompt)
    assert response_template(caps)["fields"]["reasoning_content"]["open_pattern"] == r"\A"
    text = "Step one.\n[BEGIN FINAL RESPONSE]\nAnswer."
    assert parse_reply(text, caps, prefix="<|begin_user|>\nHi" + prompt) == Reply("Answer.", "Step one.")
    assert parse_reply("Step one.", caps).finish == "in_reasoning"


def test_end_of_turn_is_what_follows_the_content() -> None:
    assert end_of_turn_in("<|im_start|>assistant\nZq7<|im_end|>\n", "Zq7") == "<|im_end|>"
    assert end_of_turn_in("Assistant: Zq7\n\n", "Zq7") is None


# --- parse_reply on good and bad output -----------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES["cases"], ids=[case["name"] for case in CASES["cases"]])
def test_parse_reply(case: dict[str, Any]) -> None:
    reply = parse_reply(case["text"], caps_for(case["state"]), prefix=case["prefix"], end_of_turn=TURN_END)
    expected = case["expected"]
    assert reply == Reply(
        expected["content"],
        expected["reasoning_content"],
        finish=expected["finish"],
        warnings=tuple(expected["warnings"]),
    )


def test_every_case_is_in_the_docs() -> None:
    doc = (ROOT / "docs" / "reply.md").read_text("utf-8")
    assert [case["name"] for case in CASES["cases"] if f"| {case['name']} |" not in doc] == []


def test_to_message() -> None:
    assert Reply("A", "r").to_message() == {"role": "assistant", "content": "A", "reasoning_content": "r"}
    assert Reply("A").to_message() == {"role": "assistant", "content": "A"}


# --- streaming --------------------------------------------------------------------------------------------------

WELL_FORMED = (
    ("free", "<think>\nplan one\n</think>\n\nThe answer.<|im_end|>"),
    ("forced_open", "<think>\nplan\n</think>\n\nThe answer. \n<|im_end|>\nafter"),
    ("closed", "  The answer.<|im_end|>"),
)


@pytest.mark.parametrize(("state", "text"), WELL_FORMED)
def test_no_split_point_leaks_a_marker(state: State, text: str) -> None:
    caps, prefix = caps_for(state), HISTORY + PROMPTS[state]
    splits = [[text[:at], text[at:]] for at in range(len(text) + 1)] + [list(text)]
    for chunks in splits:
        reply, reasoning, content = streamed(caps, prefix, chunks)
        assert (reasoning, content) == (reply.reasoning_content or "", reply.content)
        assert not any(marker in reasoning + content for marker in (START, END, TURN_END))
        assert reply == parse_reply(text, caps, prefix=prefix, end_of_turn=TURN_END)


def test_deltas_arrive_as_soon_as_no_marker_can_start_in_them() -> None:
    stream = ReplyStream(caps_for("forced_open"), prefix=PROMPTS["forced_open"])
    assert stream.initial == []
    assert stream.feed("plan") == [{"reasoning_content": "plan"}]
    assert stream.feed(" more </thi") == [{"reasoning_content": " more"}]
    assert stream.feed("nk>\n\nAn") == [{"content": "An"}]
    assert stream.feed("swer.") == [{"content": "swer."}]
    assert stream.close() == []
    assert stream.reply == Reply("Answer.", "plan more")


def test_a_prefilled_answer_is_part_of_the_reply() -> None:
    """Continuing a final message: what the prompt already wrote of the content comes first, in `initial`."""
    stream = ReplyStream(caps_for("closed"), prefix=HISTORY + PROMPTS["closed"] + "Sure, ")
    assert stream.initial == [{"content": "Sure,"}]
    assert stream.feed("here.") == [{"content": " here."}]
    stream.close()
    assert stream.reply == Reply("Sure, here.")


FRAGMENTS = ("x", "y", " ", "\n", START, END, TURN_END, "<th", "</", "think>", "<|im_")
PLAIN = "xy"


@st.composite
def chunked(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = "".join(draw(st.lists(st.sampled_from(FRAGMENTS), max_size=14)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    return text, [text[start:stop] for start, stop in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(PROMPTS)), st.booleans(), chunked())
def test_streaming_equals_batch(state: State, with_prefix: bool, sample: tuple[str, list[str]]) -> None:
    _, chunks = sample
    assert_same_as_batch(caps_for(state), HISTORY + PROMPTS[state] if with_prefix else "", chunks)


def _raw_texts(warnings: tuple[str, ...]) -> str:
    """The text each warning quotes as left out of the message (its trailing Python literal)."""
    found = (re.search(r"(?:not reasoning text|not part of the message): ('.*'|\".*\")$", w) for w in warnings)
    return "".join(ast.literal_eval(match.group(1)) for match in found if match)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(PROMPTS)), st.booleans(), chunked())
def test_every_generated_character_is_kept(state: State, with_prefix: bool, sample: tuple[str, list[str]]) -> None:
    """Plain text never vanishes and nothing is invented: every character outside the grammar's markers and layout
    whitespace ends up in a field or in a warning's quoted text."""
    text, _ = sample
    reply = parse_reply(
        text, caps_for(state), prefix=HISTORY + PROMPTS[state] if with_prefix else "", end_of_turn=TURN_END
    )
    kept = (reply.reasoning_content or "") + reply.content + _raw_texts(reply.warnings)
    assert Counter(c for c in kept if c in PLAIN) == Counter(c for c in text if c in PLAIN)
    assert not Counter(c for c in kept if not c.isspace()) - Counter(c for c in text if not c.isspace())


# --- tokenizer.parse_response with the exported template -------------------------------------------------------


def byte_tokenizer(template: str, special: tuple[str, ...], added: tuple[str, ...]) -> Any:
    """A byte-level BPE tokenizer built here: the byte alphabet, `special` as special tokens, `added` as plain ones."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(special_tokens=list(special), initial_alphabet=alphabet, show_progress=False)
    backend.train_from_iterator([], trainer=trainer)
    backend.add_tokens([AddedToken(token, special=False, normalized=False) for token in added])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=special[-1])  # type: ignore[no-untyped-call]
    tokenizer.chat_template = template
    return tokenizer


def test_tokenizer_parse_response_with_the_tiny_models_template() -> None:
    """Prompt ids from `apply_chat_template`, reply ids as a model emits them, through `tokenizer.parse_response`."""
    tokenizer = byte_tokenizer(TINY_TEMPLATE, ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), (START, END))
    template = ChatTemplate(TINY_TEMPLATE)
    turn = template.render(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning_content": "Zq7R", "content": "Zq7C"}],
        add_generation_prompt=False,
    ).prompt
    tokenizer.response_template = response_template(template.caps, end_of_turn=end_of_turn_in(turn, "Zq7C"))
    chat = [{"role": "user", "content": "What is 2+2?"}]
    for kwargs, reply, expected in (
        ({}, "<think>\nAdd them.\n</think>\n\nFour.<|im_end|>", {"reasoning_content": "Add them.", "content": "Four."}),
        ({"enable_thinking": False}, "Four.<|im_end|>", {"content": "Four."}),
        ({}, "<think>\nAdd", {"reasoning_content": "Add"}),
    ):
        prompt_ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, **kwargs)
        reply_ids = tokenizer.encode(reply, add_special_tokens=False)
        assert tokenizer.parse_response(reply_ids, prefix=prompt_ids) == {"role": "assistant", **expected}


def test_parse_response_agrees_with_parse_reply_on_the_cases() -> None:
    for case in CASES["cases"]:
        caps = caps_for(case["state"])
        message = parse_response(case["text"], response_template(caps, end_of_turn=TURN_END), prefix=case["prefix"])
        reply = parse_reply(case["text"], caps, prefix=case["prefix"], end_of_turn=TURN_END)
        assert message.get("content", "") == reply.content, case["name"]
        assert message.get("reasoning_content") == reply.reasoning_content, case["name"]


def test_an_end_of_turn_of_several_markers_is_read_when_a_server_cut_its_stop_token() -> None:
    """A server strips the stop token a model ends with: what is left of the end of turn at the end of the text is
    still the end of turn, not content; in the middle of the text it is content, as the model wrote it."""
    caps = caps_for("free")
    turn_end = "<|END_RESPONSE|><|END_OF_TURN_TOKEN|>"
    for text, content, warnings in (
        ("Hello there<|END_RESPONSE|>", "Hello there", ()),
        ("Hello there<|END_RESPONSE|>\n", "Hello there", ()),
        ("Hello there<|END_RESPONSE|><|END_OF_TURN_TOKEN|>", "Hello there", ()),
        ("Hello <|END_RESPONSE|> there", "Hello <|END_RESPONSE|> there", ()),
        (
            "Hi<|END_RESPONSE|><|END_OF_TURN_TOKEN|>more",
            "Hi",
            ("text after the end of turn, not part of the message: 'more'",),
        ),
    ):
        reply = parse_reply(text, caps, end_of_turn=turn_end)
        assert (reply.content, reply.reasoning_content, reply.warnings) == (content, None, warnings), text
        assert_same_as_batch(caps, "", list(text), end_of_turn=turn_end)


# --- an answer's wrapper ----------------------------------------------------------------------------------------

PROBE_TEMPLATES: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "probe_templates.json").read_text("utf-8"))
R7B_TOOL_USE = "llamacpp__CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"
WRAPPED = "<|START_RESPONSE|>Paris is sunny.<|END_RESPONSE|>"


def assert_reads_the_wrapped_answer(template: ChatTemplate) -> None:
    """An R7B-style reply after the template's own prompt: the wrapper is grammar, its closing tag the end of turn,
    in one go and streamed (one character at a time, and in two pieces)."""
    result = template.render([{"role": "user", "content": "Weather in Paris?"}])
    assert template.end_of_turn is not None
    for text in (WRAPPED, WRAPPED + template.end_of_turn.removeprefix("<|END_RESPONSE|>")):
        assert result.parse_reply(text) == Reply("Paris is sunny.")
        for chunks in (list(text), [text[:10], text[10:]]):
            stream = result.reply_stream()
            deltas = list(stream.initial) + [delta for chunk in chunks for delta in stream.feed(chunk)] + stream.close()
            assert stream.reply == Reply("Paris is sunny.")
            assert "".join(delta.get("content", "") for delta in deltas) == "Paris is sunny."
            assert all(set(delta) == {"content"} for delta in deltas)


@pytest.mark.parametrize("name", ["answer_wrapper_beside_calls", "answer_wrapper_without_reasoning"])
def test_an_answer_wrapper_is_grammar(name: str) -> None:
    template = ChatTemplate(PROBE_TEMPLATES[name]["template"])
    assert template.caps.reasoning.content_headers == ("<|START_RESPONSE|>",)
    assert response_template(template.caps)["fields"]["content_header"] == {
        "open_pattern": r"<\|START_RESPONSE\|>",
        "close_pattern": r"(?=[\s\S])",
    }
    assert_reads_the_wrapped_answer(template)
    assert parse_reply(WRAPPED, template.caps, raw=True) == Reply("Paris is sunny.")  # grammar, raw or not


def test_command_r7b_tool_use_keeps_its_answer_wrapper_out_of_content(zoo: tuple[ZooTemplate, ...]) -> None:
    """The template shows reasoning only beside tool calls, so no render puts its reasoning next to an answer: the
    wrapper is found against the generation prompt."""
    entry = next(entry for entry in zoo if entry.file == R7B_TOOL_USE)
    template = ChatTemplate(entry.read())
    assert (template.caps.reasoning.content_headers, template.end_of_turn) == (
        ("<|START_RESPONSE|>",),
        "<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
    )
    assert_reads_the_wrapped_answer(template)
