"""`chatcaps serve --upstream` keeping the model to its template's call format with a grammar: the tiny GGUF, never
trained on the tool it is given, behind a real llama-server, through the official `openai` client, whole and
streamed: `tool_choice: "required"` and a named function give a valid call of a declared tool whose arguments fit
its schema, `"none"` gives no call, `response_format` json_schema gives JSON that validates; the `chatcaps` report
says which grammar was applied and on which backend.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from llama_server_harness import LlamaServerMissing, RunningServer, start_llama_server
from openai import OpenAI
from paths import DATA
from serve_harness import serving
from tiny_model import tiny_gguf

from chatcaps import ChatTemplate
from chatcaps.integrations.llama_server import LlamaServerClient
from chatcaps.serve.app import create_app
from chatcaps.serve.upstream import UpstreamBackend

REQUEST: dict[str, Any] = json.loads((DATA / "constrained_request.json").read_text("utf-8"))
ASK: Any = REQUEST["ask"]
CONVERT: Any = REQUEST["convert"]
CLOCK: Any = REQUEST["clock"]
QUIET: dict[str, Any] = {"temperature": 0.0, "seed": 0, "extra_body": {"reasoning_effort": "none"}}
"""Greedy, reasoning off (the tiny model's context is 512 tokens, its tokens about a character each: a prompt with
the tools leaves about 100 for the reply)."""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    try:
        server = start_llama_server(tiny_gguf(), log=tmp_path_factory.mktemp("constrained") / "server.log")
    except LlamaServerMissing as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(upstream: RunningServer) -> Iterator[OpenAI]:
    with serving(create_app(UpstreamBackend(LlamaServerClient(upstream.url)))) as base:
        yield OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def whole_or_streamed(client: OpenAI, stream: bool, **request: Any) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The message, the finish reason and the `chatcaps` report (100 tokens at most, unless `request` says)."""
    request = {"max_tokens": 100, **QUIET, **request}
    if not stream:
        completion = client.chat.completions.create(model="tiny", messages=ASK, **request)
        dumped = completion.model_dump()
        (choice,) = dumped["choices"]
        return choice["message"], choice["finish_reason"], dumped["chatcaps"]
    message: dict[str, Any] = {"content": "", "tool_calls": {}}
    finish, report = "", dict[str, Any]()
    pieces = client.chat.completions.create(model="tiny", messages=ASK, stream=True, **request)
    for chunk in pieces:
        dumped = chunk.model_dump()
        if not dumped["choices"]:
            continue
        (choice,) = dumped["choices"]
        delta = choice["delta"]
        message["content"] += delta.get("content") or ""
        for call in delta.get("tool_calls") or ():
            merged = message["tool_calls"].setdefault(call["index"], {"function": {"name": "", "arguments": ""}})
            merged["function"]["name"] += call["function"].get("name") or ""
            merged["function"]["arguments"] += call["function"].get("arguments") or ""
        finish = choice["finish_reason"] or finish
        report = dumped.get("chatcaps") or report
    message["tool_calls"] = list(message["tool_calls"].values()) or None
    return message, finish, report


def _calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message["tool_calls"]]


def _valid_conversion(arguments: Any) -> bool:
    return (
        set(arguments) == {"amount", "to"}
        and isinstance(arguments["amount"], int)
        and arguments["to"] in ("USD", "EUR")
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_required(client: OpenAI, stream: bool) -> None:
    """One call (`parallel_tool_calls: false`): left free, the untrained model calls again until its 512-token
    context runs out; the zoo tests show two calls accepted."""
    request = {"tools": [CONVERT, CLOCK], "tool_choice": "required", "parallel_tool_calls": False}
    message, finish, report = whole_or_streamed(client, stream, **request)
    calls = _calls(message)
    assert finish == "tool_calls"
    assert calls and all(name in ("convert", "clock") for name, _ in calls)
    assert all(_valid_conversion(args) for name, args in calls if name == "convert")
    assert (report["grammar"], report["backend"], report["reply"]["warnings"]) == ("required", "llama-server", [])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_encoder_template_is_served_as_a_jinja_one(upstream: RunningServer, stream: bool) -> None:
    """A prompt encoder (docs/encoders.md: Mistral v3 as mistral-common encodes it) in front of the tiny model, as
    `chatcaps serve --encoder mistral-v3` serves it: with `tool_choice: "required"` the untrained model writes one
    call in v3's own form (`[TOOL_CALLS][...]` with a 9-character id, the grammar derived from the encoder's Caps),
    read back as `tool_calls` (200 tokens: the untrained model spends some on the layout the grammar allows).
    DeepSeek V3.2's tool prompt (1219 tokens here) does not fit the tiny model's 512."""
    pytest.importorskip("mistral_common", reason="the Mistral encoder needs the mistral extra")
    template = ChatTemplate.from_encoder("mistral-v3")
    with serving(create_app(UpstreamBackend(LlamaServerClient(upstream.url, template=template)))) as base:
        encoded = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        request = {"tools": [CONVERT], "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 200}
        message, finish, report = whole_or_streamed(encoded, stream, **request)
    ((name, arguments),) = _calls(message)
    assert (finish, name, _valid_conversion(arguments)) == ("tool_calls", "convert", True)
    assert report["grammar"] == "required"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_named_one_call(client: OpenAI, stream: bool) -> None:
    named = {"type": "function", "function": {"name": "convert"}}
    request = {"tools": [CONVERT], "tool_choice": named, "parallel_tool_calls": False}
    message, finish, report = whole_or_streamed(client, stream, **request)
    ((name, arguments),) = _calls(message)
    assert (finish, name, _valid_conversion(arguments)) == ("tool_calls", "convert", True)
    assert (report["grammar"], report["backend"]) == ("named", "llama-server")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_none(client: OpenAI, stream: bool) -> None:
    message, _, report = whole_or_streamed(client, stream, tools=[CONVERT], tool_choice="none")
    assert (message["tool_calls"], "<tool_call>" in (message["content"] or "")) == (None, False)
    assert report["grammar"] == "none"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_response_format_json_schema(client: OpenAI, stream: bool) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "unit": {"type": "string", "enum": ["USD", "EUR"]}},
        "required": ["answer", "unit"],
    }
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "money", "schema": schema}}
    message, finish, report = whole_or_streamed(client, stream, response_format=response_format)
    value = json.loads(message["content"])
    assert (finish, set(value), isinstance(value["answer"], int), value["unit"] in ("USD", "EUR")) == (
        "stop",
        {"answer", "unit"},
        True,
        True,
    )
    assert report["grammar"] == "json_schema"


ANY_INPUTS: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run",
        "parameters": {
            "type": "object",
            "properties": {"inputs": {"description": "Any value"}},
            "required": ["inputs"],
        },
    },
}
"""A property with only a description (Claude Code's `Workflow.inputs`): any JSON value. llama-cpp-python's
converter raised on it, a 500 on every request with such a tool."""
NOTE = {
    "type": "function",
    "function": {
        "name": "note",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
}
"""An unbounded string: the untrained model may run to its token limit inside it."""


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_description_only_property(client: OpenAI, choice: str) -> None:
    """Served under "auto" (the lazy grammar) and "required" (a call whose argument is any JSON value)."""
    request = {"tools": [ANY_INPUTS], "tool_choice": choice, "parallel_tool_calls": False}
    message, finish, report = whole_or_streamed(client, False, **request)
    assert report["grammar"] == ("lazy" if choice == "auto" else "required")
    if choice == "required":
        ((name, arguments),) = _calls(message)
        assert (finish, name, set(arguments), report.get("grammar_loosened")) == ("tool_calls", "run", {"inputs"}, None)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_unbounded_string_is_a_valid_call_or_cut(client: OpenAI, stream: bool) -> None:
    """A string argument the model may never close: a call whose arguments are JSON with a string `text`, or the
    token limit inside it (`finish_reason: "length"`, the text kept as content); never a call that does not parse."""
    message, finish, _ = whole_or_streamed(client, stream, tools=[NOTE], tool_choice="required", max_tokens=60)
    if finish == "length":
        assert message["tool_calls"] is None and message["content"]
    else:
        ((name, arguments),) = _calls(message)
        assert (finish, name, isinstance(arguments["text"], str)) == ("tool_calls", "note", True)
