"""`chatcaps serve --model` keeping the tiny transformers model to its template's call format with llguidance (the
same GBNF as llama-server's, `chatcaps.serve.local`): through the `openai` client, whole and streamed,
`tool_choice: "required"` and a named function give a valid call of a tool the model was never trained on, `"none"`
no call, `response_format` json_schema JSON that validates; the report names llguidance. "auto" stays free here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from serve_harness import serving
from test_serve_constrained import CLOCK, CONVERT, whole_or_streamed

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


def test_auto_stays_free(client: OpenAI) -> None:
    _, _, report = whole_or_streamed(client, False, tools=[CONVERT])
    assert "grammar" not in report


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
