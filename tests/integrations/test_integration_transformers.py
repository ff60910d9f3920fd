"""chatcaps.integrations.transformers end to end, on the tiny model trained in tests/tiny_model.py (no downloads):
`generate_chat` returns exactly what the model learnt, `apply_chat_template` equals transformers' own wherever no
polyfill is needed (every return type), and differs, as recorded, where one is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch
from helpers import check_doc_examples
from paths import DOCS
from tiny_model import TEMPLATE_FILE, tiny_model_dir
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing
from transformers import (
    AutoTokenizer,
    BatchEncoding,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from chatcaps import ChatTemplate, Reply
from chatcaps.errors import InputError, TemplateNotFoundError
from chatcaps.integrations.transformers import (
    apply_chat_template,
    eos_ids,
    generate_chat,
    render_chat,
    template_for,
)
from chatcaps.output import ParsedOutput
from chatcaps.render import RenderResult

HELLO = [{"role": "user", "content": "Hi there!"}]
HELLO_PROMPT = "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"
HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue.", "reasoning_content": "Any colour will do."},
    {"role": "user", "content": "What is 2 + 2?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        },
    }
]


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


# --- the tiny model's template -------------------------------------------------------------------------------------


def test_the_tiny_template_has_think_markers_and_an_enable_thinking_switch() -> None:
    caps = ChatTemplate.from_file(TEMPLATE_FILE).caps
    assert (caps.reasoning.format, caps.reasoning.start_marker, caps.reasoning.end_marker) == (
        "reasoning_content",
        "<think>",
        "</think>",
    )
    assert (caps.reasoning.default_state, caps.reasoning.history) == ("free", "after_last_user")
    [control] = caps.reasoning.controls
    assert (control.name, control.kind, control.role, control.values, control.default) == (
        "enable_thinking",
        "bool",
        "toggle",
        (False, True),
        True,
    )
    assert control.effect["false"].state == "closed"
    assert not caps.emits_bos


# --- generate_chat ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "reasoning", "content"),
    [
        (HELLO, "The user greets me.", "Hello! How can I help?"),
        ([{"role": "user", "content": "What is 2 + 2?"}], "Simple arithmetic: 2 + 2 = 4.", "2 + 2 = 4."),
        (HISTORY[:2], "Any colour will do.", "Blue."),
    ],
)
def test_generate_chat_returns_the_trained_reasoning_and_content(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, messages: list[Any], reasoning: str, content: str
) -> None:
    reply = generate_chat(model, tokenizer, messages, max_new_tokens=48)
    assert reply.message == {"role": "assistant", "content": content, "reasoning_content": reasoning}
    assert reply.reply == Reply(content, reasoning)
    assert reply.text == f"<think>\n{reasoning}\n</think>\n\n{content}"
    assert reply.finish_reason == "stop"
    assert reply.parsed.reasoning_finished
    assert not reply.render.starts_in_reasoning
    assert reply.render.reasoning_markers == {"start": "<think>", "end": "</think>"}
    assert reply.token_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert reply.completion_tokens == len(reply.token_ids)
    assert reply.prompt_tokens == len(tokenizer(reply.render.prompt, add_special_tokens=False)["input_ids"])
    assert reply.seconds > 0
    assert reply.tokens_per_second == reply.completion_tokens / reply.seconds


def test_generate_chat_reasoning_off_prefills_the_closed_block_and_yields_content_only(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    reply = generate_chat(model, tokenizer, HELLO, reasoning="off", max_new_tokens=48)
    assert reply.render.prompt == HELLO_PROMPT + "<think>\n\n</think>\n\n"
    assert reply.render.reasoning.to_dict() == {
        "intent": "off",
        "mechanism": "kwarg",
        "emitted": {"enable_thinking": False},
        "exact": True,
        "note": "",
    }
    assert reply.text == "Hello! How can I help?"
    assert reply.message == {"role": "assistant", "content": "Hello! How can I help?"}
    assert reply.reply == Reply("Hello! How can I help?")
    assert reply.parsed.reasoning_content is None


def test_generate_chat_stops_at_max_new_tokens_inside_the_reasoning(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    reply = generate_chat(model, tokenizer, HELLO, max_new_tokens=4)
    assert reply.finish_reason == "length"
    assert reply.completion_tokens == 4
    assert reply.text == "<think>\nThe user"
    assert reply.parsed.reasoning_content == "The user"
    assert reply.parsed.content == ""
    assert not reply.parsed.reasoning_finished
    warning = "the reply ended inside the reasoning block: no end marker '</think>'"
    assert reply.reply == Reply("", "The user", finish="in_reasoning", warnings=(warning,))


def test_generate_chat_reads_each_generation_once(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`parsed`, the earlier split, comes from `reply`: the text is read by `parse_reply` alone."""

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("parse_output was called")

    monkeypatch.setattr(RenderResult, "parse_output", refused)
    reply = generate_chat(model, tokenizer, HELLO, max_new_tokens=48)
    assert reply.parsed == ParsedOutput("Hello! How can I help?", "The user greets me.", reasoning_finished=True)


def test_eos_ids_are_the_generation_configs_and_the_tokenizers(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert eos_ids(model, tokenizer) == {end}
    configured = model.generation_config.eos_token_id
    try:
        model.generation_config.eos_token_id = [end, 0]
        assert eos_ids(model, tokenizer) == {end, 0}
        model.generation_config.eos_token_id = None
        assert eos_ids(model, tokenizer) == {end}
    finally:
        model.generation_config.eos_token_id = configured


def test_generate_chat_reads_the_reply_with_the_requests_tools(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    """The tiny model never learnt to call tools: the reply keeps its shape, and the render carries the tools the
    reply's calls would be typed from."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    reply = generate_chat(model, tokenizer, HELLO, tools=tools, max_new_tokens=8)
    assert reply.render.tools == tuple(tools)
    assert set(reply.message) <= {"role", "content", "reasoning_content", "tool_calls"}
    assert reply.message == reply.render.parse_reply(reply.text).to_message()


def test_generate_chat_moves_inputs_and_model_to_the_device(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    reply = generate_chat(model, tokenizer, HELLO, device="cpu", move_model=True, max_new_tokens=48)
    assert reply.message["content"] == "Hello! How can I help?"
    assert model.device == torch.device("cpu")


def test_generate_chat_passes_template_args_and_generate_kwargs(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    reply = generate_chat(
        model, tokenizer, HELLO, template_args={"enable_thinking": False}, max_new_tokens=48, do_sample=False
    )
    assert reply.render.prompt.endswith("<think>\n\n</think>\n\n")
    assert reply.render.template_kwargs["enable_thinking"] is False
    assert reply.message == {"role": "assistant", "content": "Hello! How can I help?"}


# --- apply_chat_template: equal to transformers where no polyfill is needed ------------------------------------


def _same(ours: Any, theirs: Any) -> None:
    """Equal values of the same type, tensors and arrays compared element by element."""
    assert type(ours) is type(theirs)
    if isinstance(theirs, BatchEncoding | Mapping):
        assert list(ours.keys()) == list(theirs.keys())
        for key in theirs:
            _same(ours[key], theirs[key])
    elif isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype
        assert torch.equal(ours, theirs)
    elif isinstance(theirs, np.ndarray):
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs)
    else:
        assert ours == theirs


RETURN_TYPES = [
    pytest.param({"tokenize": False}, id="str"),
    pytest.param({"tokenize": True}, id="BatchEncoding"),
    pytest.param({"tokenize": True, "return_dict": False}, id="ids"),
    pytest.param({"tokenize": True, "return_tensors": "pt"}, id="pt"),
    pytest.param({"tokenize": True, "return_tensors": "np"}, id="np"),
    pytest.param({"tokenize": True, "return_dict": False, "return_tensors": "pt"}, id="pt-ids"),
]


@pytest.mark.parametrize("options", RETURN_TYPES)
@pytest.mark.parametrize(
    ("messages", "extra"),
    [
        pytest.param(HELLO, {}, id="hello"),
        pytest.param(HISTORY, {}, id="history"),
        pytest.param(HISTORY, {"enable_thinking": False}, id="template-kwarg"),
        pytest.param(HISTORY, {"tools": TOOLS}, id="tools"),
        pytest.param(HISTORY, {"tools": [add]}, id="tool-function"),
    ],
)
def test_apply_chat_template_equals_transformers_when_no_polyfill_is_needed(
    tokenizer: PreTrainedTokenizerBase, messages: list[Any], extra: dict[str, Any], options: dict[str, Any]
) -> None:
    ours = apply_chat_template(tokenizer, messages, **extra, **options)
    theirs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, **extra, **options)
    _same(ours, theirs)
    _, result = render_chat(tokenizer, messages, **extra)
    assert result.applied == ()


@pytest.mark.parametrize("options", RETURN_TYPES)
def test_apply_chat_template_batch_equals_transformers(
    tokenizer: PreTrainedTokenizerBase, options: dict[str, Any]
) -> None:
    batch = [HELLO, HISTORY]
    padding: dict[str, Any] = {"padding": True} if options.get("return_tensors") else {}
    ours = apply_chat_template(tokenizer, batch, **options, **padding)
    theirs = tokenizer.apply_chat_template(batch, add_generation_prompt=True, **options, **padding)
    _same(ours, theirs)


def test_apply_chat_template_continue_final_message_equals_transformers(tokenizer: PreTrainedTokenizerBase) -> None:
    messages = [*HELLO, {"role": "assistant", "content": "Hello! How"}]
    ours = apply_chat_template(tokenizer, messages, continue_final_message=True)
    theirs = tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=False)
    assert ours == theirs == HELLO_PROMPT + "<think>\n\n</think>\n\nHello! How"


def test_apply_chat_template_without_generation_prompt_equals_transformers(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    ours = apply_chat_template(tokenizer, HELLO, add_generation_prompt=False, tokenize=True, return_dict=False)
    theirs = tokenizer.apply_chat_template(HELLO, return_dict=False)
    assert ours == theirs


# --- where chatcaps changes the prompt ----------------------------------------------------------------------------


def test_developer_role_becomes_system_where_transformers_drops_it(tokenizer: PreTrainedTokenizerBase) -> None:
    messages = [{"role": "developer", "content": "Be brief."}, *HELLO]
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == HELLO_PROMPT
    prompt, result = render_chat(tokenizer, messages)
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n" + HELLO_PROMPT
    assert [record.to_dict() for record in result.applied] == [
        {"polyfill": "roles", "detail": "messages[0]: developer -> system"}
    ]


def test_reasoning_intent_is_applied_through_the_template_switch(tokenizer: PreTrainedTokenizerBase) -> None:
    assert apply_chat_template(tokenizer, HELLO) == HELLO_PROMPT
    assert apply_chat_template(tokenizer, HELLO, reasoning="off") == HELLO_PROMPT + "<think>\n\n</think>\n\n"
    assert apply_chat_template(tokenizer, HELLO, reasoning="off") == tokenizer.apply_chat_template(
        HELLO, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )


def test_reasoning_alias_renders_as_transformers_renders_it(tokenizer: PreTrainedTokenizerBase) -> None:
    """transformers 5 copies `thinking` into `reasoning_content` itself: chatcaps' normalising (recorded) gives the
    same prompt, so here the record is the only difference."""
    messages = [*HISTORY[:2], {"role": "assistant", "content": "Blue.", "thinking": "Any colour will do."}]
    prompt, result = render_chat(tokenizer, messages, add_generation_prompt=False)
    assert prompt == tokenizer.apply_chat_template(messages, tokenize=False)
    assert "<think>\nAny colour will do.\n</think>\n\nBlue.<|im_end|>\n" in prompt
    assert [record.to_dict() for record in result.applied] == [
        {"polyfill": "normalise", "detail": "messages[2]: thinking -> reasoning_content"}
    ]


# --- BOS ----------------------------------------------------------------------------------------------------------

BOS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def bos_tokenizer() -> PreTrainedTokenizerBase:
    """The tiny vocabulary with `<|endoftext|>` as a BOS that the tokenizer itself prepends, and a template that
    writes `bos_token` too: the setup where tokenizing the rendered text naively gives two."""
    backend = Tokenizer.from_file(str(tiny_model_dir() / "tokenizer.json"))
    bos_id = backend.token_to_id("<|endoftext|>")
    backend.post_processor = TemplateProcessing(single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos_id)])
    # transformers leaves TokenizersBackend.__init__ (*args, **kwargs) unannotated
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>", eos_token="<|im_end|>")  # type: ignore[no-untyped-call]
    tokenizer.chat_template = BOS_TEMPLATE
    return tokenizer


def test_no_double_bos_when_the_template_writes_it_and_the_tokenizer_adds_it(
    bos_tokenizer: PreTrainedTokenizerBase,
) -> None:
    bos_id = bos_tokenizer.bos_token_id
    prompt = apply_chat_template(bos_tokenizer, HELLO)
    assert prompt.startswith("<|endoftext|><|im_start|>user")
    assert bos_tokenizer(prompt)["input_ids"][:2] == [bos_id, bos_id]  # the pitfall: the tokenizer adds one more
    assert template_for(bos_tokenizer).caps.emits_bos
    ids = apply_chat_template(bos_tokenizer, HELLO, tokenize=True, return_dict=False)
    assert ids[0] == bos_id
    assert ids.count(bos_id) == 1
    assert ids == bos_tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, return_dict=False)


# --- where the template comes from --------------------------------------------------------------------------------


def test_the_template_is_compiled_once_per_text_and_tokens(tokenizer: PreTrainedTokenizerBase) -> None:
    template = template_for(tokenizer)
    assert template is template_for(tokenizer)
    assert (template.bos_token, template.eos_token) == ("", "<|im_end|>")
    assert template.source.text == (tiny_model_dir() / "chat_template.jinja").read_text(encoding="utf-8")


def test_from_tokenizer_reads_the_template_and_special_tokens(bos_tokenizer: PreTrainedTokenizerBase) -> None:
    template = ChatTemplate.from_tokenizer(bos_tokenizer)
    assert (template.source.text, template.bos_token, template.eos_token) == (
        BOS_TEMPLATE,
        "<|endoftext|>",
        "<|im_end|>",
    )
    assert template.source.origin == "tokenizer"


@pytest.fixture
def named_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    copy: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(tiny_model_dir())
    copy.chat_template = {
        "default": tokenizer.chat_template,
        "tool_use": (
            "{% for t in tools %}[{{ t.function.name }}: {{ t.function.description }}]{% endfor %}"
            "{% for m in messages %}{{ m.content }}{% endfor %}"
        ),
    }
    return copy


def test_named_templates_are_picked_as_transformers_picks_them(named_tokenizer: PreTrainedTokenizerBase) -> None:
    for options in ({}, {"tools": TOOLS}, {"chat_template": "tool_use", "tools": TOOLS}, {"chat_template": "{{ 1 }}"}):
        ours = apply_chat_template(named_tokenizer, HELLO, **options)
        assert ours == named_tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=False, **options)
    assert apply_chat_template(named_tokenizer, HELLO, tools=TOOLS) == "[add: Add two numbers.]Hi there!"
    assert ChatTemplate.from_tokenizer(named_tokenizer, name="tool_use").source.name.endswith(":tool_use")


# --- bad input ----------------------------------------------------------------------------------------------------


def test_unsupported_transformers_arguments_are_refused_by_name(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(InputError, match=r"^documents: not supported by chatcaps' apply_chat_template$"):
        apply_chat_template(tokenizer, HELLO, documents=[{"title": "t", "text": "x"}])
    assert apply_chat_template(tokenizer, HELLO, documents=None, sanitize_control_tokens=False) == HELLO_PROMPT


def test_generation_prompt_and_continue_final_message_together_are_refused(
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    with pytest.raises(InputError, match="continue_final_message and add_generation_prompt are not compatible"):
        apply_chat_template(tokenizer, HELLO, add_generation_prompt=True, continue_final_message=True)


def test_a_tool_that_is_neither_schema_nor_function_is_refused(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(InputError, match=r"^tools\[0\]: a tool is a JSON schema dict or a Python function, not int$"):
        apply_chat_template(tokenizer, HELLO, tools=[3])  # type: ignore[list-item]


def test_a_tokenizer_without_template_says_so(bos_tokenizer: PreTrainedTokenizerBase) -> None:
    # transformers leaves TokenizersBackend.__init__ (*args, **kwargs) unannotated
    bare = PreTrainedTokenizerFast(tokenizer_object=bos_tokenizer.backend_tokenizer)  # type: ignore[no-untyped-call]
    with pytest.raises(TemplateNotFoundError, match="no chat template"):
        apply_chat_template(bare, HELLO)


def test_a_bad_reasoning_intent_is_an_input_error(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(InputError, match="reasoning must be None"):
        apply_chat_template(tokenizer, HELLO, reasoning="maximum")  # type: ignore[arg-type]


def test_the_docs_examples_print_what_they_say(capsys: pytest.CaptureFixture[str]) -> None:
    check_doc_examples(DOCS / "transformers.md", capsys)
