"""chatcaps.integrations.llamacpp on a real llama.cpp (llama-cpp-python) and real vocabularies, no downloads:

- the tiny model of tests/tiny_model.py as a GGUF: the same prompt token ids and the same greedy tokens as
  transformers on the same weights, the reply split into reasoning and content, `reasoning="off"`, streaming;
- real tokenizers (the vocab-only GGUF files in the llama-cpp-python sdist, which setup keeps in the build cache):
  a chatcaps-rendered prompt tokenizes to the same ids in transformers and in llama.cpp, with one BOS at most.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

import pytest
from helpers import check_doc_examples
from llama_cpp import Llama, llama_chat_format
from llama_cpp.llama_chat_format import LlamaChatCompletionHandler
from llama_cpp.llama_types import ChatCompletionRequestMessage
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from paths import DATA, DOCS
from tiny_model import tiny_chats, tiny_gguf
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from chatcaps import ChatTemplate
from chatcaps.constants import build_cache_dir
from chatcaps.integrations.llamacpp import ChatHandler, _reply_chunks, chat_handler
from chatcaps.integrations.transformers import apply_chat_template, generate_chat
from chatcaps.intent import Intent

LLAMA_CPP_PYTHON = "0.3.36"
HELLO: list[ChatCompletionRequestMessage] = [{"role": "user", "content": "Hi there!"}]
HELLO_PROMPT = "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"
CHATS = [pytest.param(chat, id=chat["messages"][-1]["content"]) for chat in tiny_chats()]


@pytest.fixture(scope="module")
def llm() -> Iterator[Llama]:
    model = Llama(model_path=str(tiny_gguf()), n_ctx=256, n_threads=1, seed=0, verbose=False)
    yield model
    model.close()


def _as_llama_handler(handler: ChatHandler) -> LlamaChatCompletionHandler:
    """`handler` as llama-cpp-python's handler type: it follows the protocol at run time, but returns plain dicts
    where the protocol names its TypedDict responses, which mypy cannot match structurally."""
    return cast(LlamaChatCompletionHandler, handler)


def _greedy(llm: Llama, prompt: list[int], limit: int = 48) -> tuple[int, ...]:
    """llama.cpp's greedy tokens after `prompt`, the end-of-sequence token included."""
    llm.reset()  # type: ignore[no-untyped-call]  # llama-cpp-python leaves Llama.reset unannotated
    tokens = []
    for token in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
        tokens.append(token)
        if token == llm.token_eos() or len(tokens) == limit:
            break
    return tuple(tokens)


# --- the same model in transformers and llama.cpp -----------------------------------------------------------------


@pytest.mark.parametrize("reasoning", [None, "off"])
@pytest.mark.parametrize("chat", CHATS)
def test_prompt_ids_and_greedy_tokens_match_transformers(
    llm: Llama,
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    chat: dict[str, Any],
    reasoning: Intent,
) -> None:
    ids, result = chat_handler(reasoning=reasoning).render(llm, chat["messages"])
    assert ids == apply_chat_template(
        tokenizer, chat["messages"], reasoning=reasoning, tokenize=True, return_dict=False
    )
    reply = generate_chat(model, tokenizer, chat["messages"], reasoning=reasoning, max_new_tokens=48)
    assert reply.render.prompt == result.prompt
    assert _greedy(llm, ids) == reply.token_ids


@pytest.mark.parametrize("chat", CHATS)
def test_chat_completion_splits_the_trained_reasoning_out(llm: Llama, chat: dict[str, Any]) -> None:
    llm.chat_handler = _as_llama_handler(chat_handler())
    reply = llm.create_chat_completion(messages=chat["messages"], temperature=0.0, max_tokens=48)
    assert isinstance(reply, dict)
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"] == {"role": "assistant", **chat["reply"]}
    assert reply["choices"][0]["finish_reason"] == "stop"
    ids, _ = chat_handler().render(llm, chat["messages"])
    assert reply["usage"]["prompt_tokens"] == len(ids)


def test_reasoning_off_renders_the_closed_block_and_yields_content_only(llm: Llama) -> None:
    handler = chat_handler(reasoning="off")
    _, result = handler.render(llm, HELLO)
    assert result.prompt == HELLO_PROMPT + "<think>\n\n</think>\n\n"
    assert result.reasoning.emitted == {"enable_thinking": False}
    llm.chat_handler = _as_llama_handler(handler)
    reply = llm.create_chat_completion(messages=HELLO, temperature=0.0, max_tokens=48)
    assert isinstance(reply, dict)
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "Hello! How can I help?"}


def test_the_intent_per_request_by_a_direct_call_or_a_replaced_handler(llm: Llama) -> None:
    handler = chat_handler(reasoning="off")
    reply = handler(llama=llm, messages=HELLO, reasoning=None, temperature=0.0, max_tokens=48)
    assert isinstance(reply, dict)
    assert reply["choices"][0]["message"]["reasoning_content"] == "The user greets me."
    llm.chat_handler = _as_llama_handler(dataclasses.replace(handler, reasoning=None))
    completion = llm.create_chat_completion(messages=HELLO, temperature=0.0, max_tokens=48)
    assert isinstance(completion, dict)
    # A Mapping view: llama-cpp-python's ChatCompletionResponseMessage TypedDict has no reasoning_content key.
    message: Mapping[str, Any] = completion["choices"][0]["message"]
    assert message["reasoning_content"] == "The user greets me."


def test_template_args_reach_the_template(llm: Llama) -> None:
    reply = chat_handler(template_args={"enable_thinking": False})(
        llama=llm, messages=HELLO, temperature=0.0, max_tokens=48
    )
    assert isinstance(reply, dict)
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "Hello! How can I help?"}


def test_a_reply_cut_by_max_tokens_is_unfinished_reasoning(llm: Llama) -> None:
    reply = chat_handler()(llama=llm, messages=HELLO, temperature=0.0, max_tokens=4)
    assert isinstance(reply, dict)
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "", "reasoning_content": "The user"}


def test_streaming_sends_reasoning_and_content_deltas(llm: Llama) -> None:
    stream = chat_handler()(llama=llm, messages=HELLO, temperature=0.0, max_tokens=48, stream=True)
    assert not isinstance(stream, dict)
    chunks = list(stream)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(ChatCompletionChunk.model_validate(chunk, strict=True) for chunk in chunks)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks[1:]]
    assert "".join(delta.get("reasoning_content", "") for delta in deltas) == "The user greets me."
    assert "".join(delta.get("content", "") for delta in deltas) == "Hello! How can I help?"
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks][-1] == "stop"


TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
MESSAGE_FIELDS = {"role", "content", "reasoning_content", "tool_calls"}


def test_a_request_with_tools_gets_openais_wire_shape(llm: Llama) -> None:
    """The tiny model never learnt to call tools (its text is what it is): the shape is checked here, the reading of
    calls on data (tests/test_hook.py, the reply tests)."""
    reply = chat_handler()(llama=llm, messages=HELLO, tools=TOOLS, temperature=0.0, max_tokens=8)
    assert isinstance(reply, dict)
    ChatCompletion.model_validate(reply, strict=True)
    first = reply["choices"][0]
    assert set(first["message"]) <= MESSAGE_FIELDS
    assert first["finish_reason"] == ("tool_calls" if first["message"].get("tool_calls") else "length")
    stream = chat_handler()(llama=llm, messages=HELLO, tools=TOOLS, temperature=0.0, max_tokens=8, stream=True)
    assert not isinstance(stream, dict)
    chunks = list(stream)
    assert all(ChatCompletionChunk.model_validate(chunk, strict=True) for chunk in chunks)
    assert all(set(chunk["choices"][0]["delta"]) <= MESSAGE_FIELDS for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == first["finish_reason"]


def test_tool_choice_is_kept_by_the_templates_grammar() -> None:
    """The tiny model, never trained on tools, through the handler: `tool_choice: "required"` gives a valid call of
    the declared tool (the grammar from the template's call format, on llama.cpp's sampler), whole and streamed;
    `"none"` gives no call. One call (`parallel_tool_calls=False`): left free, the untrained model calls again until
    `max_tokens`."""
    request = json.loads((DATA / "constrained_request.json").read_text("utf-8"))
    model = Llama(model_path=str(tiny_gguf()), n_ctx=512, n_threads=1, seed=0, verbose=False)
    options: dict[str, Any] = {"llama": model, "messages": request["ask"], "tools": [request["convert"]]}
    options |= {"temperature": 0.0, "max_tokens": 100, "reasoning": "off"}
    required = {**options, "tool_choice": "required", "parallel_tool_calls": False}
    reply = chat_handler()(**required)
    assert isinstance(reply, dict)
    first = reply["choices"][0]
    (call,) = first["message"]["tool_calls"]
    arguments = json.loads(call["function"]["arguments"])
    assert (first["finish_reason"], call["function"]["name"], set(arguments)) == (
        "tool_calls",
        "convert",
        {"amount", "to"},
    )
    chunks = list(cast(Iterator[dict[str, Any]], chat_handler()(**required, stream=True)))
    streamed = "".join(
        piece["function"].get("arguments") or ""
        for chunk in chunks
        for piece in chunk["choices"][0]["delta"].get("tool_calls") or ()
    )
    assert json.loads(streamed) == arguments
    unused = chat_handler()(**options, tool_choice="none")
    assert isinstance(unused, dict) and not unused["choices"][0]["message"].get("tool_calls")


def test_the_template_can_be_given(llm: Llama) -> None:
    template = ChatTemplate.from_str(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    handler = chat_handler(template)
    assert handler.template_for(llm) is template
    reply = handler(llama=llm, messages=HELLO, temperature=0.0, max_tokens=48)
    assert isinstance(reply, dict)
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "Hello! How can I help?"}


def test_the_gguf_template_is_read_once(llm: Llama) -> None:
    assert ChatHandler().template_for(llm) is chat_handler(reasoning="high").template_for(llm)
    assert ChatHandler().template_for(llm).source.origin == "gguf"


# --- streamed reply: any chunking joins up to parse_reply of the whole -------------------------------------------

TINY = ChatTemplate.from_file(DATA / "tiny_model" / "chat_template.jinja")
FORCED_OPEN = ChatTemplate.from_str(
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def chat_chunks(pieces: list[str], finish_reason: str) -> Iterator[dict[str, Any]]:
    """What llama-cpp-python's own conversion makes of `Llama.create_completion(stream=True)`'s chunks for these
    pieces of text and its last chunk: the chunks the handler reads."""
    completion = []
    for text, reason in [*((piece, None) for piece in pieces), ("", finish_reason)]:
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": reason}
        completion.append(
            {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "tiny", "choices": [choice]}
        )
    chat: Any = llama_chat_format._convert_completion_to_chat(iter(cast(Any, completion)), stream=True)
    return cast(Iterator[dict[str, Any]], chat)


@pytest.mark.parametrize(
    ("template", "text"),
    [
        (TINY, "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"),
        (TINY, "\n<think>\nR </think>C </"),
        (TINY, "Hello! <think> is content here."),
        (TINY, "<b>bold</b>"),
        (TINY, "<think>\nnever closed <"),
        (FORCED_OPEN, "Reasoning.\n</think>\n\nAnswer."),
        (FORCED_OPEN, "Still reasoning </thi"),
    ],
)
@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_streamed_chunks_join_up_to_the_whole_reply_read(template: ChatTemplate, text: str, size: int) -> None:
    """llama-cpp-python's own chunk conversion, then the handler's: one delta a chunk, the finish reason last."""
    result = template.render(HELLO)
    pieces = [text[index : index + size] for index in range(0, len(text), size)]
    chunks = list(_reply_chunks(chat_chunks(pieces, "stop"), result))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(chunk["id"] == "chatcmpl-1" for chunk in chunks)
    assert all(ChatCompletionChunk.model_validate(chunk, strict=True) for chunk in chunks)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks[1:]]
    assert all(len(delta) <= 1 for delta in deltas)
    whole = result.parse_reply(text)
    assert "".join(delta.get("reasoning_content", "") for delta in deltas) == (whole.reasoning_content or "")
    assert "".join(delta.get("content", "") for delta in deltas) == whole.content
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None] * (len(chunks) - 1) + ["stop"]


def test_a_prefilled_answer_streams_first() -> None:
    result = TINY.render([*HELLO, {"role": "assistant", "content": "Hello!"}], continue_final_message=True)
    chunks = list(_reply_chunks(chat_chunks([" How", "?"], "stop"), result))
    assert [chunk["choices"][0]["delta"] for chunk in chunks] == [
        {"role": "assistant"},
        {"content": "Hello!"},
        {"content": " How"},
        {"content": "?"},
        {},
    ]


# --- real vocabularies: the same ids in transformers and llama.cpp -----------------------------------------------

# Our own Llama-3-style header template (it writes bos_token itself).
HEADER_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CONVERSATION = [
    {"role": "system", "content": "Answer in one line."},
    {"role": "user", "content": "Wie spät ist es?  Ünïcödé, emoji 🙂, code `x = 1`\n\ttabs."},
    {"role": "assistant", "content": "Es ist 12:00 Uhr."},
    {"role": "user", "content": "And 1234567 + 89?"},
]


@cache
def vocab_gguf(name: str) -> Path:
    """`ggml-vocab-<name>.gguf` from the llama-cpp-python sdist (fetched by scripts/install_llama_cpp_python.sh),
    extracted once into the build cache."""
    cache_root = build_cache_dir()
    target = cache_root / "vocab" / LLAMA_CPP_PYTHON / f"ggml-vocab-{name}.gguf"
    if target.is_file():
        return target
    sdist = cache_root / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not sdist.is_file():
        pytest.fail(f"{sdist} is missing: run scripts/setup.sh (scripts/install_llama_cpp_python.sh fetches it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    member = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/models/{target.name}"
    scratch = Path(tempfile.mkdtemp(dir=target.parent))
    try:
        with tarfile.open(sdist) as archive:
            archive.extract(member, scratch, filter="data")
        os.replace(scratch / member, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


@pytest.mark.parametrize(
    ("name", "template_text", "bos_count"),
    [
        pytest.param("qwen2", None, 0, id="qwen2-own-template"),
        pytest.param("llama-bpe", HEADER_TEMPLATE, 1, id="llama3-header-template"),
    ],
)
def test_real_vocab_prompt_ids_match_between_transformers_and_llama_cpp(
    name: str, template_text: str | None, bos_count: int
) -> None:
    gguf = vocab_gguf(name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    vocab = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    template = ChatTemplate.from_gguf(gguf) if template_text is None else ChatTemplate.from_str(template_text)
    # The GGUF's template with its special tokens is what transformers loaded too.
    assert template_text is not None or tokenizer.chat_template == template.source.text
    template = ChatTemplate(template.source, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token)
    ours = apply_chat_template(
        tokenizer, CONVERSATION, chat_template=template.source.text, tokenize=True, return_dict=False
    )
    theirs = tokenizer.apply_chat_template(
        CONVERSATION, chat_template=template.source.text, add_generation_prompt=True, return_dict=False
    )
    ids, result = ChatHandler(template).render(vocab, CONVERSATION)
    assert result.applied == ()
    assert ids == ours == theirs
    assert ids.count(vocab.token_bos()) == bos_count
    if bos_count:
        assert ids[0] == vocab.token_bos()
    assert vocab.detokenize(ids, special=True).decode("utf-8") == result.prompt


def test_the_docs_examples_print_what_they_say(capsys: pytest.CaptureFixture[str]) -> None:
    check_doc_examples(DOCS / "llamacpp_python.md", capsys)
