"""`LlamaServerClient.chat` with a `Choice`: the grammar from the template's call format goes into `/completion`
(`grammar`, and the client's preserved tokens joined by the grammar's), and the tiny GGUF, never trained on the
tool, calls it with arguments that fit its schema, whole and streamed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from llama_server_harness import LlamaServerMissing, RunningServer, start_llama_server
from paths import DATA
from tiny_model import tiny_gguf

from chatcaps.errors import InputError
from chatcaps.integrations.llama_server import LlamaServerClient
from chatcaps.integrations.llama_server_base import Choice

REQUEST: dict[str, Any] = json.loads((DATA / "constrained_request.json").read_text("utf-8"))
ASK: Any = REQUEST["ask"]
CONVERT: Any = REQUEST["convert"]
GREEDY: dict[str, Any] = {"n_predict": 100, "temperature": 0.0, "seed": 0}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServerClient]:
    try:
        server: RunningServer = start_llama_server(tiny_gguf(), log=tmp_path_factory.mktemp("client") / "server.log")
    except LlamaServerMissing as error:
        pytest.fail(str(error), pytrace=False)
    with LlamaServerClient(server.url) as found:
        yield found
    server.stop()


def test_required_call(client: LlamaServerClient) -> None:
    reply = client.chat(ASK, tools=[CONVERT], reasoning="off", choice=Choice("required", False), **GREEDY)
    ((name, arguments),) = [(call["function"]["name"], call["function"]["arguments"]) for call in reply.tool_calls]
    assert (name, set(json.loads(arguments)), reply.warnings) == ("convert", {"amount", "to"}, ())


def test_streamed_named_call(client: LlamaServerClient) -> None:
    named = Choice({"type": "function", "function": {"name": "convert"}}, False)
    stream = client.chat_stream(ASK, tools=[CONVERT], reasoning="off", choice=named, **GREEDY)
    list(stream)
    ((name, arguments),) = [(c["function"]["name"], c["function"]["arguments"]) for c in stream.reply.tool_calls]
    assert (name, set(json.loads(arguments))) == ("convert", {"amount", "to"})


def test_unknown_tool_refused(client: LlamaServerClient) -> None:
    with pytest.raises(InputError, match="tool_choice names 'nope', which is not among the tools"):
        client.chat(ASK, tools=[CONVERT], choice=Choice({"type": "function", "function": {"name": "nope"}}), **GREEDY)
