"""The reply side reached from a render: `ChatTemplate.end_of_turn` and `.response_template()`, and
`RenderResult.parse_reply` / `.reply_stream()`, which know the prompt (an opened block, a prefill) and the tools.

The exported template is checked the way a user sets it: `tokenizer.response_template = template.response_template()`
on a real tokenizer built here with the zoo template as its chat template, then `tokenizer.parse_response` on the ids
of the reply the template itself renders.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import DATA, DOCS
from test_reply import byte_tokenizer

from chatcaps import ChatcapsError, ChatTemplate, RenderResult, Reply, ReplyContext
from chatcaps.zoo import ZooTemplate, load_zoo

TINY_TEMPLATE = (DATA / "tiny_model" / "chat_template.jinja").read_text("utf-8")
REASONING, CONTENT = "Zq7 thinks it over:\nfirst <a>, then {b}.", 'Zq7 answers "yes"\n\nwith two paragraphs.'
CHAT = [{"role": "user", "content": "Hi"}]
TURN = [*CHAT, {"role": "assistant", "reasoning_content": REASONING, "content": CONTENT}]
END_OF_TURN = {
    "llamacpp__Qwen-Qwen3-0.6B.jinja": "<|im_end|>",  # free, <think>
    "llamacpp__Qwen3.5-4B.jinja": "<|im_end|>",  # forced open
    "llamacpp__openai-gpt-oss-120b.jinja": "<|return|>",  # the last turn's end, not a past turn's <|end|>
    "llamacpp__Kimi-K3.jinja": "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>",
    "google__gemma-3-1b-it.jinja": "<end_of_turn>",  # no reasoning
    "allenai__Llama-3.1-Tulu-3-70B.jinja": None,  # writes the eos token, which the zoo leaves empty
}


def zoo_template(zoo: tuple[ZooTemplate, ...], file: str) -> tuple[ZooTemplate, ChatTemplate]:
    entry = next(entry for entry in zoo if entry.file == file)
    return entry, ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)


def model_part(prompt: str, turn: str) -> str:
    """What the model generated: the turn's render past the longest prefix it shares with the prompt."""
    shared = next((at for at, (one, other) in enumerate(zip(prompt, turn, strict=False)) if one != other), len(prompt))
    return turn[shared:]


@pytest.mark.parametrize(("file", "end_of_turn"), END_OF_TURN.items())
def test_end_of_turn_is_found_by_rendering(zoo: tuple[ZooTemplate, ...], file: str, end_of_turn: str | None) -> None:
    _, template = zoo_template(zoo, file)
    assert template.end_of_turn == end_of_turn
    assert template.render(CHAT).end_of_turn == end_of_turn


def test_response_template_is_the_reply_grammar_with_the_end_of_turn(zoo: tuple[ZooTemplate, ...]) -> None:
    _, template = zoo_template(zoo, "google__gemma-3-1b-it.jinja")
    assert template.response_template() == {
        "defaults": {"role": "assistant"},
        "start_anchor": "<start_of_turn>model\n",
        "fields": {
            "content": {"content": "text"},
            "after_end_of_turn": {"open": "<end_of_turn>", "content": "text"},
        },
    }


@pytest.mark.parametrize("file", [file for file, end in END_OF_TURN.items() if end])
def test_tokenizer_parse_response_with_the_exported_template(zoo: tuple[ZooTemplate, ...], file: str) -> None:
    """`tokenizer.response_template = template.response_template()`: the tokenizer reads the reply's ids after the
    prompt ids its own `apply_chat_template` made, and so does `RenderResult.parse_reply` on the text."""
    entry, template = zoo_template(zoo, file)
    reasoning = template.caps.reasoning
    markers = tuple(marker for marker in (reasoning.start_marker, reasoning.end_marker, template.end_of_turn) if marker)
    tokenizer = byte_tokenizer(entry.read(), ("<|endoftext|>",), markers)
    tokenizer.response_template = template.response_template()
    result = template.render(CHAT)
    text = model_part(result.prompt, template.render(TURN, add_generation_prompt=False).prompt)
    assert text.rstrip().endswith(template.end_of_turn or "")
    prompt_ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert tokenizer.decode(prompt_ids) == result.prompt
    expected: dict[str, Any] = {"role": "assistant", "content": CONTENT}
    if reasoning.end_marker:
        expected["reasoning_content"] = REASONING
    assert tokenizer.parse_response(tokenizer.encode(text, add_special_tokens=False), prefix=prompt_ids) == expected
    assert result.parse_reply(text) == Reply(CONTENT, expected.get("reasoning_content"))


# --- RenderResult.parse_reply and reply_stream on the tiny model's template ---------------------------------------

TINY = ChatTemplate(TINY_TEMPLATE)
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
PLAIN = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
PLAIN += "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


def test_the_end_of_turn_and_the_prompt_are_read_with_the_reply() -> None:
    result = TINY.render(CHAT)
    assert result.end_of_turn == "<|im_end|>"
    assert result.parse_reply("<think>\nAdd.\n</think>\n\nFour.<|im_end|>") == Reply("Four.", "Add.")
    off = TINY.render(CHAT, reasoning="off")
    assert off.prompt.endswith("<think>\n\n</think>\n\n")
    assert off.parse_reply("Four.<|im_end|>") == Reply("Four.")


def test_a_continued_message_is_part_of_the_reply() -> None:
    result = TINY.render([*CHAT, {"role": "assistant", "content": "Sure,"}], continue_final_message=True)
    assert result.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nSure,")
    assert result.parse_reply(" four.<|im_end|>") == Reply("Sure, four.")


def test_without_a_generation_prompt_the_text_is_the_whole_message() -> None:
    """The prompt ends with a finished turn: its last assistant header is a past turn's, not the reply's start."""
    history = [*CHAT, {"role": "assistant", "content": "Earlier."}, {"role": "user", "content": "And?"}]
    result = TINY.render(history, add_generation_prompt=False)
    assert result.parse_reply("<think>x</think>Now.<|im_end|>") == Reply("Now.", "x")


def test_the_reply_keeps_the_requests_tools() -> None:
    """The tools polyfill moves the tools into the system turn for a template without them; the reply's parser
    still types call arguments from the request's schemas."""
    result = ChatTemplate(PLAIN).render(CHAT, tools=TOOLS)
    assert result.template_kwargs["tools"] is None
    assert result.tools == tuple(TOOLS)
    assert TINY.render(CHAT, tools=TOOLS).tools == tuple(TOOLS)


def test_raw_keeps_the_reasoning_in_the_content() -> None:
    result = TINY.render(CHAT)
    text = "<think>\nAdd.\n</think>\n\nFour.<|im_end|>"
    assert result.parse_reply(text, raw=True) == Reply("<think>\nAdd.\n</think>\n\nFour.")
    off = TINY.render(CHAT, reasoning="off")
    assert off.parse_reply("Four.<|im_end|>", raw=True) == Reply("Four.")


@pytest.mark.parametrize("raw", [False, True])
def test_the_stream_merges_into_the_batch_reply(raw: bool) -> None:
    result = TINY.render(CHAT)
    text = "<think>\nAdd.\n</think>\n\nFour.<|im_end|>"
    stream = result.reply_stream(raw=raw)
    deltas = stream.initial + [delta for char in text for delta in stream.feed(char)] + stream.close()
    assert stream.reply == result.parse_reply(text, raw=raw)
    merged = {key: "".join(delta.get(key, "") for delta in deltas) for key in ("reasoning_content", "content")}
    assert merged == {"reasoning_content": stream.reply.reasoning_content or "", "content": stream.reply.content}


# --- property: every generated character is kept ------------------------------------------------------------------

PROPERTY_TEMPLATES = (
    "llamacpp__Qwen-Qwen3-0.6B.jinja",
    "llamacpp__Qwen3.5-4B.jinja",
    "llamacpp__openai-gpt-oss-120b.jinja",
    "llamacpp__Kimi-K3.jinja",
    "mistralai__mistral-common__v15_think.jinja",
    "google__gemma-3-1b-it.jinja",
)
PLAIN_TEXT = "Zq7é🙂"
"""Characters no marker of these templates holds: each one the model writes must come back somewhere."""


@cache
def property_renders() -> dict[str, tuple[RenderResult, ...]]:
    """Per template: renders whose reply is read (the default prompt, reasoning off, no generation prompt)."""
    zoo = load_zoo()
    renders: dict[str, tuple[RenderResult, ...]] = {}
    for file in PROPERTY_TEMPLATES:
        _, template = zoo_template(zoo, file)
        renders[file] = (
            template.render(CHAT),
            template.render(CHAT, reasoning="off"),
            template.render(CHAT, add_generation_prompt=False),
        )
    return renders


def grammar_words(result: RenderResult) -> list[str]:
    reasoning = result.caps.reasoning
    words = (reasoning.start_marker, reasoning.end_marker, *reasoning.content_headers, result.end_of_turn)
    return [word for word in words if word]


@st.composite
def replies(draw: st.DrawFn) -> tuple[RenderResult, str]:
    """A render and a text built from its grammar's words, pieces of them, layout and plain characters."""
    result = draw(st.sampled_from(property_renders()[draw(st.sampled_from(PROPERTY_TEMPLATES))]))
    words = grammar_words(result)
    pieces = [piece for word in words for piece in (word[: len(word) // 2], word[len(word) // 2 :])]
    fragment = st.sampled_from([*words, *pieces, " ", "\n", "<", "|"]) | st.text(PLAIN_TEXT, min_size=1, max_size=3)
    fragment |= st.text(max_size=4)  # anything else a model may write
    return result, "".join(draw(st.lists(fragment, max_size=12)))


def raw_texts(warnings: tuple[str, ...]) -> str:
    """The text each warning quotes as left out of the message (its trailing Python literal)."""
    found = (re.search(r"(?:not reasoning text|not part of the message): ('.*'|\".*\")$", w) for w in warnings)
    return "".join(ast.literal_eval(match.group(1)) for match in found if match)


def kept_text(reply: Reply) -> str:
    calls = "".join(json.dumps(call, ensure_ascii=False) for call in reply.tool_calls)
    return (reply.reasoning_content or "") + reply.content + calls + raw_texts(reply.warnings)


@settings(max_examples=400, deadline=None)
@given(sample=replies())
def test_every_generated_character_ends_up_in_a_field_or_a_warning(
    zoo: tuple[ZooTemplate, ...], sample: tuple[RenderResult, str]
) -> None:
    """Plain characters are never dropped, and nothing is invented: what the reply holds beyond the generated text's
    own characters is what the prompt alone gives (a prefilled answer, Kimi K3's answer opener with reasoning off) or
    layout."""
    result, text = sample
    for raw in (False, True):
        kept = kept_text(result.parse_reply(text, raw=raw))
        assert Counter(c for c in kept if c in PLAIN_TEXT) == Counter(c for c in text if c in PLAIN_TEXT)
        invented = Counter(c for c in kept if not c.isspace()) - Counter(c for c in text if not c.isspace())
        assert not invented - Counter(kept_text(result.parse_reply("", raw=raw)))


@settings(max_examples=200, deadline=None)
@given(sample=replies())
def test_raw_content_is_the_text_up_to_the_end_of_turn(
    zoo: tuple[ZooTemplate, ...], sample: tuple[RenderResult, str]
) -> None:
    """Less the answer headers: grammar, raw or not (these templates' are tags, taken out wherever they stand)."""
    result, text = sample
    end = result.end_of_turn
    before, _, after = text.partition(end) if end else (text, "", "")
    headers = "|".join(re.escape(header) for header in result.caps.reasoning.content_headers)
    content = "".join(piece.strip() for piece in re.split(headers, before)) if headers else before.strip()
    reply = result.parse_reply(text, raw=True)
    assert (reply.content, reply.reasoning_content) == (content, None)
    assert raw_texts(reply.warnings) == after.strip()


# --- continuing an unfinished reasoning block ---------------------------------------------------------------------

UNFINISHED = "Zq7 starts to think"
CONTINUATION: dict[str, Any] = json.loads((DATA / "reply" / "continuation_failures.json").read_text("utf-8"))


def test_a_continued_message_resumes_inside_its_reasoning() -> None:
    result = TINY.render([*CHAT, {"role": "assistant", "reasoning_content": "Let me"}], continue_final_message=True)
    assert result.prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nLet me"
    assert result.continued == "<think>\nLet me"
    assert result.parse_reply(" think.</think>\n\nHello.<|im_end|>") == Reply("Hello.", "Let me think.")
    stream = result.reply_stream()
    assert stream.initial == [{"reasoning_content": "Let me"}]
    assert stream.feed(" think.</think>\n\nHello.") == [{"reasoning_content": " think."}, {"content": "Hello."}]
    assert stream.close() == []
    assert result.parse_reply(" think.", raw=True) == Reply("think.")


def test_the_reply_context_is_what_reading_needs() -> None:
    """The prompt where the reply continues it, the request's tools, and what a continued message already wrote."""
    result = TINY.render([*CHAT, {"role": "assistant", "reasoning_content": "Let me"}], continue_final_message=True)
    context = result.reply_context
    assert context == ReplyContext(TINY.caps, result.prompt)
    assert context.continued == result.continued == "<think>\nLet me"
    with_tools = TINY.render(CHAT, tools=TOOLS)
    assert with_tools.reply_context == ReplyContext(TINY.caps, with_tools.prompt, tuple(TOOLS))
    history = [*CHAT, {"role": "assistant", "content": "Earlier."}]
    assert TINY.render(history, add_generation_prompt=False).reply_context == ReplyContext(TINY.caps)


def test_a_message_with_content_continues_its_content() -> None:
    message = {"role": "assistant", "reasoning_content": "Done.", "content": "Hello"}
    result = TINY.render([*CHAT, message], continue_final_message=True)
    assert result.prompt.endswith("<think>\nDone.\n</think>\n\nHello")
    assert result.parse_reply("!<|im_end|>") == Reply("Hello!", "Done.")


def test_an_inline_template_continues_inside_the_block(zoo: tuple[ZooTemplate, ...]) -> None:
    """QwQ reads reasoning inline: the polyfill writes the continued message's block without its end marker, so the
    prompt stops inside it and the model's text goes on in it (llama.cpp's case at test-chat.cpp line 3318)."""
    _, template = zoo_template(zoo, "llamacpp__Qwen-QwQ-32B.jinja")
    message = {"role": "assistant", "reasoning_content": "I'm", "content": ""}
    result = template.render([*CHAT, message], reasoning="on", continue_final_message=True)
    assert result.prompt.endswith("<|im_start|>assistant\n<think>\nI'm")
    assert [record.detail for record in result.applied] == [
        "messages[1]: reasoning_content written inline left open (the message is continued)"
    ]
    assert result.parse_reply(" thinking\n</think>\nHello, world!") == Reply("Hello, world!", "I'm thinking")


def test_continuing_reasoning_over_the_zoo(zoo: tuple[ZooTemplate, ...]) -> None:
    """Every template with reasoning markers resumes inside the block and reads the reply back (the prefilled part
    joined with what the model writes), or is listed with the reason (docs/reply.md)."""
    failing = set()
    for entry in zoo:
        template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
        reasoning = template.caps.reasoning
        if reasoning.format == "none" or not reasoning.end_marker:
            continue
        message = {"role": "assistant", "reasoning_content": UNFINISHED, "content": ""}
        try:  # a message the prompt cannot continue raises, on render or on reading the reply
            result = template.render([*CHAT, message], continue_final_message=True)
            reply = result.parse_reply(f" more.{reasoning.end_marker}Answer.")
        except ChatcapsError:
            failing.add(entry.file)
            continue
        read = (reply.reasoning_content, reply.content) == (f"{UNFINISHED} more.", "Answer.")
        if not (result.prompt.endswith(UNFINISHED) and read):
            failing.add(entry.file)
    assert sorted(failing) == sorted(CONTINUATION["failures"])


def test_continuation_failures_are_in_the_docs() -> None:
    doc = (DOCS / "reply.md").read_text("utf-8")
    assert [file for file in CONTINUATION["failures"] if f"`{file}`" not in doc] == []


def test_the_tiny_models_own_tokenizer_reads_replies_with_the_exported_template(tokenizer: Any) -> None:
    """The trained tokenizer of tests/tiny_model.py (its template, its vocabulary): `parse_response` on reply ids
    after the prompt ids its `apply_chat_template` made, with reasoning on and off."""
    template = ChatTemplate.from_tokenizer(tokenizer)
    chat = [{"role": "user", "content": "Hi there!"}]
    thinking = "<think>\nThe user greets me.\n</think>\n\nHello!<|im_end|>"
    saved = tokenizer.response_template  # the tokenizer is shared by the session's tests
    tokenizer.response_template = template.response_template()
    try:
        for kwargs, reply, expected in (
            ({}, thinking, {"reasoning_content": "The user greets me."}),
            ({"enable_thinking": False}, "Hello!<|im_end|>", {}),
        ):
            prompt_ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False, **kwargs)
            reply_ids = tokenizer.encode(reply, add_special_tokens=False)
            assert tokenizer.parse_response(reply_ids, prefix=prompt_ids) == {
                "role": "assistant",
                "content": "Hello!",
                **expected,
            }
    finally:
        tokenizer.response_template = saved


def test_a_continued_message_left_out_of_the_prompt_raises(zoo: tuple[ZooTemplate, ...]) -> None:
    """Kimi-K2 shows no reasoning: a final assistant message with only reasoning is left out, and continuing it
    raises, naming it, instead of reading the prompt before it (the system prompt) as the reply's content."""
    _, template = zoo_template(zoo, "llamacpp__moonshotai-Kimi-K2.jinja")
    system = {"role": "system", "content": "Be brief."}
    reasoning_only = {"role": "assistant", "reasoning_content": "plan"}
    with pytest.raises(ChatcapsError) as raised:
        template.render([system, *CHAT, reasoning_only], continue_final_message=True)
    assert str(raised.value) == (
        "messages[2]: continue_final_message: this assistant message is left out of the prompt (the template shows"
        " none of what it holds), so there is nothing to continue"
    )
    result = template.render([system, *CHAT, {"role": "assistant", "content": "Hel"}], continue_final_message=True)
    assert result.parse_reply("lo<|im_end|>") == Reply("Hello")


@pytest.mark.parametrize(
    ("reasoning", "reply", "expected"),
    [
        ("I'm", " thinking\n[BEGIN FINAL RESPONSE]\nHello!", Reply("Hello!", "I'm thinking")),
        ("Here are two", " ways.\n[BEGIN FINAL RESPONSE]\nOk.", Reply("Ok.", "Here are two ways.")),
        ("assistant", " mode.\n[BEGIN FINAL RESPONSE]\nOk.", Reply("Ok.", "assistant mode.")),
    ],
)
def test_a_continued_reasoning_after_the_header_reads_as_after_the_generation_prompt(
    zoo: tuple[ZooTemplate, ...], reasoning: str, reply: str, expected: Reply
) -> None:
    """Apriel writes a final message's reasoning right after `<|begin_assistant|>\n`, without its generation
    prompt's `Here are my reasoning steps:\n`, and its grammar starts every message inside the block: the reasoning
    is read as if it followed the generation prompt, whole even where it begins like that text or like the header
    (llama.cpp's cases at test-chat.cpp lines 6229 and 6239)."""
    _, template = zoo_template(zoo, "llamacpp__Apriel-1.6-15b-Thinker-fixed.jinja")
    message = {"role": "assistant", "reasoning_content": reasoning, "content": ""}
    result = template.render([*CHAT, message], continue_final_message=True)
    assert result.prompt.endswith(f"\n<|begin_assistant|>\n{reasoning}")
    assert result.continued == reasoning
    assert result.parse_reply(reply) == expected
    stream = result.reply_stream()
    deltas = [*stream.initial, *stream.feed(reply), *stream.close()]
    assert deltas[0] == {"reasoning_content": reasoning}
    assert stream.reply == expected


def test_reading_a_continued_message_without_the_grammars_header_raises(zoo: tuple[ZooTemplate, ...]) -> None:
    """Apriel's generation prompt ends with its own opening text, which a continued message does not have: the
    prompt renders, but the reply grammar's start anchor is not in it, and reading on would take the system prompt
    for reasoning, so reading a reply raises."""
    _, template = zoo_template(zoo, "llamacpp__Apriel-1.6-15b-Thinker-fixed.jinja")
    result = template.render([*CHAT, {"role": "assistant", "content": "Hel"}], continue_final_message=True)
    assert result.prompt.endswith("<|begin_assistant|>\nHel")
    with pytest.raises(ChatcapsError) as raised:
        result.parse_reply("lo")
    assert str(raised.value) == (
        "messages[1]: continue_final_message: the prompt holds no '\\n<|begin_assistant|>\\nHere are my reasoning"
        " steps:\\n' (where the reply grammar finds the assistant message) after the conversation before this"
        " message: the template drops it or writes it another way, so a reply cannot be read as its continuation"
    )
