"""`chatcaps serve --model` keeping the tiny transformers model to its template's call format with llguidance (the
same GBNF as llama-server's, `chatcaps.serve.local`): through the `openai` client, whole and streamed,
`tool_choice: "required"` and a named function give a valid call of a tool the model was never trained on, `"none"`
no call, `response_format` json_schema JSON that validates; the report names llguidance. "auto" is lazy: free text
until the model writes the call opener, the calls after it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from openai import OpenAI
from serve_harness import serving
from test_serve_constrained import CLOCK, CONVERT, whole_or_streamed

from chatcaps.reply.constraint import constraint
from chatcaps.serve.app import create_app
from chatcaps.serve.local import LocalBackend, lark_grammar

pytest.importorskip("llguidance")


@pytest.fixture(scope="module")
def client(model: Any, tokenizer: Any) -> Iterator[OpenAI]:
    with serving(create_app(LocalBackend(model, tokenizer, name="tiny"))) as base:
        yield OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def _arguments(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message["tool_calls"]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_required_and_named(client: OpenAI, stream: bool) -> None:
    named = {"type": "function", "function": {"name": "convert"}}
    for choice, kind in (("required", "required"), (named, "named")):
        request = {"tools": [CONVERT, CLOCK], "tool_choice": choice, "parallel_tool_calls": False}
        message, finish, report = whole_or_streamed(client, stream, **request)
        ((name, arguments),) = _arguments(message)
        assert finish == "tool_calls"
        assert name == "convert" or (kind == "required" and name == "clock")
        assert name == "clock" or (set(arguments), arguments["to"] in ("USD", "EUR")) == ({"amount", "to"}, True)
        assert (report["grammar"], report["backend"]) == (kind, "llguidance")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_none_and_json(client: OpenAI, stream: bool) -> None:
    message, _, report = whole_or_streamed(client, stream, tools=[CONVERT], tool_choice="none")
    assert (message["tool_calls"], report["grammar"]) == (None, "none")
    schema = {"type": "object", "properties": {"usd": {"type": "integer"}}, "required": ["usd"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "money", "schema": schema}}
    message, finish, report = whole_or_streamed(client, stream, response_format=response_format)
    value = json.loads(message["content"])
    assert (finish, set(value), isinstance(value["usd"], int), report["grammar"]) == (
        "stop",
        {"usd"},
        True,
        "json_schema",
    )


def test_auto_is_lazy(client: OpenAI) -> None:
    message, finish, report = whole_or_streamed(client, False, tools=[CONVERT])
    assert (message["tool_calls"], finish, report["grammar"], report["backend"]) == (None, "stop", "lazy", "llguidance")


def test_the_lazy_grammar_holds_from_the_call_opener(model: Any, tokenizer: Any) -> None:
    """Token by token as `generate` calls the processor: every token allowed while the text is prose, then, once
    the text holds the trigger (the opener and the call's first word), only what goes on to a call of `convert`."""
    backend = LocalBackend(model, tokenizer, name="tiny")
    grammar = constraint(backend.template(tools=True).caps, [CONVERT], "auto")
    assert grammar is not None
    assert (grammar.kind, grammar.triggers) == ("lazy", ('<tool_call>{"name":',))
    processor = backend.logits_processor(grammar)
    written = tokenizer.encode('Let me see. <tool_call>{"name": "conv', add_special_tokens=False)
    ids = [*tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)]
    allowed: list[list[str]] = []
    for token in [None, *written]:
        ids += [] if token is None else [token]
        scores = processor(torch.tensor([ids]), torch.zeros(1, model.config.vocab_size))
        allowed.append([tokenizer.decode([i]) for i in range(len(tokenizer)) if scores[0, i] > float("-inf")])
    opened = len(tokenizer.encode('Let me see. <tool_call>{"name":', add_special_tokens=False))
    assert all(len(tokens) == len(tokenizer) for tokens in allowed[:opened])
    assert allowed[opened:] == [[" "], ['"'], ["c"], ["o"], ["n"], ["v"], ["er"]]


def test_lark_grammar_reads_byte_by_byte(tokenizer: Any) -> None:
    """Every terminal `gbnf_to_lark` makes is a rule, every literal its characters (a lexeme each: llguidance's
    greedy lexer then never runs one lexeme past where another ends), `<think>` also as the tokenizer's token."""
    gbnf = "\n".join(
        [
            "ws ::= [ \\t\\n]{0,8}",
            'thought ::= ( [^\\x3c] | "<" [^\\x2f] )*',
            'root ::= "<think>" thought "</" ws "<p=\\"a\\">"',
        ]
    )
    assert lark_grammar(gbnf, tokenizer).splitlines() == [
        "%llguidance {}",
        "",
        "ws: /[ \\t\\n]/{0,8}",
        'thought: ((/[^\\x3c]/ | "<" /[^\\x2f]/))*',
        'start: (("<" "t" "h" "i" "n" "k" ">") | <[347]>) thought ("<" "/") ws ("<" "p" "=" "\\"" "a" "\\"" ">")',
    ]
