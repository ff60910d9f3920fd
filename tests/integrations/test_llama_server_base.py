"""`LlamaServerBase` and its steps without a server: each request they make, exactly, answered with what llama-server
answers; the `/completion` bodies for text and token prompts; the preserved tokens; the finish reasons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import pytest

from chatcaps import ChatTemplate
from chatcaps.errors import InputError, ServerError
from chatcaps.integrations.llama_server_base import (
    Call,
    LlamaServerBase,
    ServerSetup,
    Steps,
    Stop,
    check_sampling,
    grammar_text,
    read_event,
    read_stop,
    reply_finish_reason,
    server_finish,
    setup_steps,
)
from chatcaps.zoo import ZooTemplate

_T = TypeVar("_T")
URL = "http://127.0.0.1:8080"
THINK = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
"""A template that opens a reasoning block, closed by `</think>` (the reply side's markers)."""
CALL = {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def run(steps: Steps[_T], answers: list[Mapping[str, Any]]) -> tuple[_T, list[Call]]:
    """`steps` answered in turn from `answers`; its result and every request it made."""
    calls: list[Call] = []
    try:
        calls.append(next(steps))
        for answer in answers:
            calls.append(steps.send(answer))
    except StopIteration as done:
        return done.value, calls
    raise AssertionError(f"the steps asked for more than {len(answers)} answers: {calls}")


def base(*, adds_bos: bool = False, preserved: tuple[str, ...] = ("<|end|>",), **props: Any) -> LlamaServerBase:
    template = ChatTemplate(THINK, bos_token="<s>")
    return LlamaServerBase(URL, 5.0, ServerSetup(props, template, None, "<s>", adds_bos, preserved))


def pieces(*tokens: tuple[int, str | list[int]]) -> dict[str, Any]:
    return {"tokens": [{"id": ident, "piece": piece} for ident, piece in tokens]}


# --- startup ----------------------------------------------------------------------------------------------------------


def test_setup_reads_props_then_asks_tokenize_about_the_bos_and_the_control_tokens() -> None:
    props = {"chat_template": THINK, "bos_token": "<s>", "eos_token": "</s>"}
    found, calls = run(
        setup_steps(URL, None, "jinja2"),
        [
            props,
            {"tokens": [1, 1]},
            pieces((4, "</think>"), (300, "\n"), (3, "<think>")),
            {"tokens": [4, 300, 60, 116, 104]},
        ],
    )
    assert calls == [
        ("/props", None),
        ("/tokenize", {"content": "<s>", "add_special": True, "parse_special": True}),
        (
            "/tokenize",
            {"content": "</think>\n<think>", "add_special": False, "parse_special": True, "with_pieces": True},
        ),
        ("/tokenize", {"content": "</think>\n<think>", "add_special": False, "parse_special": False}),
    ]
    assert (found.props, found.template.source.text, found.tool_use_template) == (props, THINK, None)
    assert (found.bos_token, found.adds_bos, found.preserved_tokens) == ("<s>", True, ("<think>",))


def test_setup_without_a_bos_or_markers_asks_nothing_more_and_takes_the_tool_use_template() -> None:
    plain = "{% for m in messages %}{{ m.content }}{% endfor %}"
    props = {"chat_template": plain, "chat_template_tool_use": plain + "!", "bos_token": ""}
    found, calls = run(setup_steps(URL, None, "jinja2"), [props])
    assert calls == [("/props", None)]
    assert found.tool_use_template is not None and found.tool_use_template.source.text == plain + "!"
    assert (found.adds_bos, found.preserved_tokens) == (False, ())


def test_a_template_given_replaces_the_servers_and_its_tool_use_template() -> None:
    given = ChatTemplate("{{ messages[0].content }}")
    props = {"chat_template": THINK, "chat_template_tool_use": THINK, "bos_token": "<s>"}
    found, calls = run(setup_steps(URL, given, "jinja2"), [props, {"tokens": [1]}])
    assert (found.template, found.tool_use_template, found.adds_bos) == (given, None, False)
    assert calls[1:] == [("/tokenize", {"content": "<s>", "add_special": True, "parse_special": True})]


def test_a_piece_that_is_not_whole_utf8_is_no_control_token() -> None:
    found, _ = run(
        setup_steps(URL, None, "jinja2"), [{"chat_template": THINK}, pieces((7, [226, 150])), {"tokens": []}]
    )
    assert found.preserved_tokens == ()


def test_a_tokenize_answer_without_tokens_is_a_server_error() -> None:
    with pytest.raises(ServerError, match=r"^http://127\.0\.0\.1:8080/tokenize: answered without a list of tokens"):
        run(setup_steps(URL, None, "jinja2"), [{"chat_template": THINK}, {"tokens": [1, 2]}])


def test_the_channel_style_grammar_text_is_markers_and_content_headers(zoo: tuple[ZooTemplate, ...]) -> None:
    """gpt-oss: each marker is several tokens, so llama-server would keep none of them sent whole."""
    oss = next(template for template in zoo if template.file == "llamacpp__openai-gpt-oss-120b.jinja")
    template = ChatTemplate(oss.read())
    assert grammar_text(template) == (
        "<|channel|>analysis<|message|>\n<|end|>\n<|start|>assistant<|channel|>final<|message|>"
    )
    assert grammar_text(template, ChatTemplate(THINK)) == "</think>\n<think>\n" + grammar_text(template)


# --- requests ---------------------------------------------------------------------------------------------------------


def test_completion_body_for_a_text_prompt() -> None:
    body, calls = run(base().completion_steps("<|im_start|>user\nHi", {"n_predict": 8}, stream=False), [])
    assert calls == []
    assert body == {"preserved_tokens": ["<|end|>"], "n_predict": 8, "prompt": "<|im_start|>user\nHi"}


def test_completion_body_for_a_token_prompt_streamed() -> None:
    """A model that adds a BOS, a prompt without one: the prompt goes as the server's token ids."""
    steps = base(adds_bos=True).completion_steps("Hi", {"temperature": 0.0}, stream=True)
    body, calls = run(steps, [{"tokens": [72, 105]}])
    assert calls == [("/tokenize", {"content": "Hi", "add_special": False, "parse_special": True})]
    assert body == {"preserved_tokens": ["<|end|>"], "temperature": 0.0, "prompt": [72, 105], "stream": True}


def test_a_rendered_bos_is_left_to_the_server() -> None:
    body, calls = run(base(adds_bos=True).completion_steps("<s>Hi", {}, stream=False), [])
    assert (body, calls) == ({"preserved_tokens": ["<|end|>"], "prompt": "Hi"}, [])


def test_preserved_tokens_given_replace_the_clients() -> None:
    body = base().completion_body("Hi", {"preserved_tokens": ["<x>"]}, stream=True)
    assert body == {"preserved_tokens": ["<x>"], "prompt": "Hi", "stream": True}


def test_prompt_and_stream_are_the_clients() -> None:
    with pytest.raises(InputError, match=r"^prompt, stream: set by the client, not a sampling option$"):
        check_sampling({"stream": True, "prompt": "x", "n_predict": 1})
    with pytest.raises(InputError, match=r"^prompt: set by the client"):
        run(base(adds_bos=True).completion_steps("Hi", {"prompt": "x"}, stream=False), [])


def test_chat_steps_render_with_the_tool_use_template_for_a_request_with_tools() -> None:
    listing = "{% for t in tools %}[{{ t.function.name }}: {{ t.function.description }}]{% endfor %}"
    tool_use = ChatTemplate(listing + THINK)
    server = LlamaServerBase(URL, 5.0, ServerSetup({}, ChatTemplate(THINK), tool_use, "", False, ()))
    tool = {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {}}}
    hello = [{"role": "user", "content": "Hi"}]
    (with_tools, body), _ = run(server.chat_steps(hello, [tool], None, None, {}, stream=False), [])
    (without, _body), _ = run(server.chat_steps(hello, [], None, None, {}, stream=False), [])
    assert with_tools.prompt == "[now: The time]<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert without.prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert body == {"preserved_tokens": [], "prompt": with_tools.prompt}
    assert (server.template_for(tools=True), server.template_for(tools=False)) == (tool_use, server.template)


def test_the_model_is_the_model_files_name() -> None:
    assert base(model_path="/models/tiny.gguf").model == "tiny.gguf"
    assert base().model == "llama-server"


# --- replies ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_type", "tool_calls", "finish"),
    [
        ("eos", (), "stop"),
        ("word", (), "stop"),
        ("limit", (), "length"),
        ("eos", (CALL,), "tool_calls"),
        ("limit", (CALL,), "length"),
    ],
)
def test_finish_reasons(stop_type: str, tool_calls: tuple[dict[str, Any], ...], finish: str) -> None:
    assert reply_finish_reason(stop_type, tool_calls) == finish
    assert server_finish(stop_type) == ("length" if stop_type == "limit" else "stop")


def test_events_are_read_with_their_stop() -> None:
    assert read_event({"content": "Hi", "stop": False}, URL) == ("Hi", None)
    last = {"content": "", "stop": True, "stop_type": "limit", "tokens_evaluated": 11, "tokens_predicted": 3}
    assert read_event(last, URL) == ("", Stop("limit", 11, 3))
    with pytest.raises(
        ServerError, match=r"^http://127\.0\.0\.1:8080: an event without text content: \{'content': 1\}"
    ):
        read_event({"content": 1}, URL)
    with pytest.raises(ServerError, match=r"^http://127\.0\.0\.1:8080: the reply has no integer 'tokens_predicted'"):
        read_stop({"stop": True, "tokens_evaluated": 1, "tokens_predicted": True}, URL)
