"""chatcaps against a real llama-server on loopback: `/props` read back, `LlamaServerClient` generating with the tiny
trained model, BOS handling on a model whose tokenizer adds one, and errors as chatcaps errors.

The server binary comes from scripts/build_llama_server.sh (see tests/llama_server_harness.py); without it these tests
fail, saying how to build it.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from llama_server_harness import (
    LlamaServerMissing,
    RunningServer,
    free_port,
    llama_server_binary,
    post_json,
    start_llama_server,
    write_random_gguf,
)
from paths import DOCS
from tiny_model import TEMPLATE_FILE, tiny_chats, tiny_gguf, tiny_model_dir

from chatcaps import ChatTemplate
from chatcaps.errors import InputError, ServerError, SourceError
from chatcaps.integrations.llama_server import AsyncLlamaServerClient, LlamaServerClient
from chatcaps.integrations.llama_server_base import ServerSetup
from chatcaps.sources import TemplateSource, from_gguf, from_llama_server
from chatcaps.transport import LlamaServerTransport

DOC = DOCS / "llamacpp.md"
CHATS = tiny_chats()
GREEDY: dict[str, Any] = {"n_predict": 64, "temperature": 0.0, "seed": 0}
BOS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HELLO = [{"role": "user", "content": "Hello"}]


def _start(model: Path, log: Path) -> RunningServer:
    try:
        llama_server_binary()
    except LlamaServerMissing as error:
        missing = str(error)
    else:
        return start_llama_server(model, log=log)
    pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """llama-server with the tiny trained model (Qwen2 BPE vocabulary, no BOS added)."""
    server = _start(tiny_gguf(), tmp_path_factory.mktemp("tiny-server") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def bos_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """llama-server with random weights, a SentencePiece vocabulary that adds `<s>`, and a template writing it too."""
    folder = tmp_path_factory.mktemp("bos-server")
    server = _start(write_random_gguf(folder / "bos.gguf", BOS_TEMPLATE, add_bos=True), folder / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client(tiny_server: RunningServer) -> LlamaServerClient:
    return LlamaServerClient(tiny_server.url)


# --- /props ---------------------------------------------------------------------------------------------------------


def test_props_reads_back_the_gguf_template_and_tokens(tiny_server: RunningServer) -> None:
    """The server reports its lexer's source: the file's text less the one trailing newline jinja2 also drops."""
    source = from_llama_server(tiny_server.url)
    template = TEMPLATE_FILE.read_text("utf-8")
    assert template.endswith("%}\n")
    expected = TemplateSource(
        template.removesuffix("\n"), tiny_server.url, "<|endoftext|>", "<|im_end|>", "llama_server"
    )
    assert source == expected
    in_file = from_gguf(tiny_gguf())
    assert (in_file.text, in_file.bos_token, in_file.eos_token) == (template, "<|endoftext|>", "<|im_end|>")
    served = ChatTemplate.from_llama_server(f"{tiny_server.url}/props")
    assert served.source == source
    assert served.render(CHATS[2]["messages"]).prompt == ChatTemplate(in_file).render(CHATS[2]["messages"]).prompt


def test_props_has_no_tool_use_template_for_a_model_with_one_template(tiny_server: RunningServer) -> None:
    with pytest.raises(SourceError, match=r"no chat template named 'tool_use'; it has 'default'$"):
        from_llama_server(tiny_server.url, name="tool_use")


# --- LlamaServerClient with the tiny trained model ------------------------------------------------------------------


@pytest.mark.parametrize("chat", CHATS, ids=[chat["messages"][-1]["content"] for chat in CHATS])
def test_chat_returns_the_trained_reasoning_and_content(client: LlamaServerClient, chat: dict[str, Any]) -> None:
    reply = client.chat(chat["messages"], **GREEDY)
    reasoning, content = chat["reply"]["reasoning_content"], chat["reply"]["content"]
    assert reply.text == f"<think>\n{reasoning}\n</think>\n\n{content}"
    assert (reply.reasoning_content, reply.content, reply.reasoning_finished) == (reasoning, content, True)
    assert (reply.stop_type, reply.truncated) == ("eos", False)
    assert reply.completion_tokens > 0
    assert reply.timings["predicted_per_second"] > 0
    assert reply.to_message() == {"role": "assistant", "content": content, "reasoning_content": reasoning}
    assert (reply.tool_calls, reply.warnings, reply.finish_reason) == ((), (), "stop")
    assert reply.render.prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("chat", CHATS, ids=[chat["messages"][-1]["content"] for chat in CHATS])
def test_chat_stream_gives_the_replys_deltas(client: LlamaServerClient, chat: dict[str, Any]) -> None:
    whole = client.chat(chat["messages"], **GREEDY)
    stream = client.chat_stream(chat["messages"], **GREEDY)
    deltas = list(stream)
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert all(len(delta) == 1 for delta in deltas[1:])
    merged = {key: "".join(delta.get(key, "") for delta in deltas[1:]) for key in ("reasoning_content", "content")}
    assert merged == {"reasoning_content": whole.reasoning_content, "content": whole.content}
    assert stream.text == whole.text
    assert stream.reply.to_message() == whole.to_message()
    assert (stream.stop_type, stream.finish_reason) == ("eos", "stop")
    assert stream.completion_tokens == whole.completion_tokens


def test_a_reply_cut_by_n_predict_finishes_with_length(client: LlamaServerClient) -> None:
    reply = client.chat(HELLO, **{**GREEDY, "n_predict": 3})
    assert (reply.stop_type, reply.finish_reason, reply.reasoning_finished) == ("limit", "length", False)
    stream = client.chat_stream(HELLO, **{**GREEDY, "n_predict": 3})
    list(stream)
    assert (stream.finish_reason, stream.reply.finish) == ("length", "in_reasoning")


def test_a_request_with_tools_gets_openais_wire_shape(client: LlamaServerClient) -> None:
    """The tiny model never learnt to call tools: the shape is checked here, the reading of calls on data."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    reply = client.chat(HELLO, tools=tools, **{**GREEDY, "n_predict": 8})
    assert reply.render.tools == tuple(tools)
    assert set(reply.to_message()) <= {"role", "content", "reasoning_content", "tool_calls"}
    assert reply.finish_reason == ("tool_calls" if reply.tool_calls else "length")
    stream = client.chat_stream(HELLO, tools=tools, **{**GREEDY, "n_predict": 8})
    assert all(set(delta) <= {"role", "content", "reasoning_content", "tool_calls"} for delta in stream)
    assert stream.finish_reason == reply.finish_reason


@pytest.mark.parametrize("chat", CHATS, ids=[chat["messages"][-1]["content"] for chat in CHATS])
def test_reasoning_off_sends_the_closed_block_and_gets_content_only(
    client: LlamaServerClient, chat: dict[str, Any]
) -> None:
    reply = client.chat(chat["messages"], reasoning="off", **GREEDY)
    assert reply.render.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert reply.render.reasoning.emitted == {"enable_thinking": False}
    assert (reply.text, reply.content, reply.reasoning_content) == (chat["reply"]["content"],) * 2 + (None,)


def test_prompt_is_tokenized_once_as_transformers_tokenizes_it(client: LlamaServerClient) -> None:
    """No BOS is added (the vocabulary does not ask for one) and llama.cpp's tokens are the Hugging Face tokenizer's."""
    from transformers import AutoTokenizer

    reply = client.chat(CHATS[2]["messages"], **GREEDY)
    ids = client.tokenize(reply.render.prompt)
    hf_ids = AutoTokenizer.from_pretrained(tiny_model_dir())(reply.render.prompt, add_special_tokens=False).input_ids
    assert ids == hf_ids
    assert reply.prompt_tokens == len(ids)
    assert client.adds_bos is False
    assert client.preserved_tokens == ()  # <think> and </think> are not control tokens in this vocabulary
    assert client.prompt_for_server(reply.render.prompt) == reply.render.prompt


# --- BOS: a tokenizer that adds one, a template that writes one -----------------------------------------------------


def test_a_rendered_bos_is_left_to_the_server(bos_server: RunningServer) -> None:
    client = LlamaServerClient(bos_server.url)
    assert (client.bos_token, client.adds_bos, client.preserved_tokens) == ("<s>", True, ())
    reply = client.chat(HELLO, n_predict=1, temperature=0.0)
    prompt = reply.render.prompt
    assert prompt == "<s><|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert client.prompt_for_server(prompt) == prompt.removeprefix("<s>")
    ids = client.tokenize(prompt)
    assert (ids[0], ids.count(1)) == (1, 1)
    assert reply.prompt_tokens == len(ids)
    # What the client avoids: the rendered prompt sent as it is starts with two BOS tokens.
    raw = post_json(f"{bos_server.url}/completion", {"prompt": prompt, "n_predict": 1})
    assert raw["tokens_evaluated"] == len(ids) + 1


def test_llama_server_writes_a_control_token_only_where_one_entry_preserves_it(bos_server: RunningServer) -> None:
    """Why `preserved_tokens` lists single control tokens: `logit_bias` makes the random model write `<|im_start|>`
    twice; the server writes its text where the token itself is preserved, and not where it is part of a longer
    entry (a whole marker), as it keeps only entries that are one token."""
    client = LlamaServerClient(bos_server.url)
    (start,) = client.tokenize("<|im_start|>")
    request = {"prompt": "Hello", "n_predict": 2, "temperature": 0.0, "logit_bias": [[start, 100.0]]}
    written = {
        entry: post_json(f"{bos_server.url}/completion", {**request, "preserved_tokens": [entry]})["content"]
        for entry in ("<|im_start|>", "<|im_start|>assistant")
    }
    assert written == {"<|im_start|>": "<|im_start|><|im_start|>", "<|im_start|>assistant": ""}


def test_a_prompt_without_bos_is_sent_as_tokens_so_none_is_added(bos_server: RunningServer) -> None:
    template = ChatTemplate(BOS_TEMPLATE.removeprefix("{{ bos_token }}"), bos_token="<s>", eos_token="</s>")
    client = LlamaServerClient(bos_server.url, template=template)
    reply = client.chat(HELLO, n_predict=1, temperature=0.0)
    ids = client.tokenize(reply.render.prompt)
    assert 1 not in ids
    assert client.prompt_for_server(reply.render.prompt) == ids
    assert reply.prompt_tokens == len(ids)


def test_a_tool_use_template_is_read_and_used_for_requests_with_tools(tmp_path: Path) -> None:
    listing = "{% for t in tools %}[{{ t.function.name }}: {{ t.function.description }}]{% endfor %}"
    tool_use = BOS_TEMPLATE.replace("{% for m in messages %}", listing + "{% for m in messages %}")
    named = [{"name": "default", "template": BOS_TEMPLATE}, {"name": "tool_use", "template": tool_use}]
    server = _start(write_random_gguf(tmp_path / "tool-use.gguf", named), tmp_path / "server.log")
    try:
        assert from_llama_server(server.url, name="tool_use").text == tool_use
        client = LlamaServerClient(server.url)
        tool = {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {}}}
        with_tools = client.chat(HELLO, tools=[tool], n_predict=1)
        without = client.chat(HELLO, n_predict=1)
    finally:
        server.stop()
    assert with_tools.render.prompt == "<s>[now: The time]<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert without.render.prompt == "<s><|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


# --- the async twin -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["tiny_server", "bos_server"])
def test_the_async_client_reads_the_server_as_the_sync_one_does(server: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(server).url
    sync = LlamaServerClient(url)
    prompt = "<|im_start|>user\nHello<|im_end|>\n"

    async def read() -> tuple[ServerSetup, str | list[int], list[int]]:
        client = await AsyncLlamaServerClient.connect(url)
        try:
            return client.setup, await client.prompt_for_server(prompt), await client.tokenize(prompt)
        finally:
            await client.aclose()

    found, sent, tokens = asyncio.run(read())
    assert (found.props, found.template.source, found.tool_use_template) == (sync.props, sync.template.source, None)
    assert (found.bos_token, found.adds_bos, found.preserved_tokens) == (sync.bos_token, sync.adds_bos, ())
    assert (sent, tokens) == (sync.prompt_for_server(prompt), sync.tokenize(prompt))
    assert sent == (tokens if sync.adds_bos else prompt)


# --- the transport's stream ----------------------------------------------------------------------------------------


def test_a_streamed_completion_is_the_same_reply_in_events(client: LlamaServerClient) -> None:
    """llama-server's `/completion` with `stream: true`, read as server-sent events: the pieces join into the text the
    client got in one reply, and only the last event says `stop`."""
    reply = client.chat(CHATS[0]["messages"], **GREEDY)
    request = client.completion_body(reply.render.prompt, GREEDY, stream=True)
    with LlamaServerTransport(f"{client.url}/props/", timeout=60) as server:
        events = list(server.stream_json("/completion", request))
    assert "".join(event["content"] for event in events) == reply.text
    assert [event["stop"] for event in events] == [False] * (len(events) - 1) + [True]
    assert events[-1]["tokens_predicted"] == reply.completion_tokens


def test_a_refused_stream_is_a_server_error_with_the_servers_message(tiny_server: RunningServer) -> None:
    with LlamaServerTransport(tiny_server.url, timeout=60) as server, pytest.raises(ServerError) as caught:
        list(server.stream_json("/completion", {"prompt": "x", "stream": True, "grammar": "root ::= undefined-rule"}))
    assert caught.value.status == 400
    assert str(caught.value).startswith(f"{tiny_server.url}/completion: HTTP 400: ")


# --- errors ---------------------------------------------------------------------------------------------------------


def test_no_server_is_a_source_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SourceError, match=rf"^{re.escape(url)}/props: the server did not answer: .*refused"):
        LlamaServerClient(url)


def test_prompt_is_not_a_sampling_option(client: LlamaServerClient) -> None:
    with pytest.raises(InputError, match=r"^prompt: set by the client, not a sampling option$"):
        client.chat(HELLO, prompt="x")
    with pytest.raises(InputError, match=r"^stream: set by the client, not a sampling option$"):
        client.chat_stream(HELLO, stream=False)


def test_a_refused_request_is_a_server_error_with_the_servers_message(client: LlamaServerClient) -> None:
    with pytest.raises(ServerError) as caught:
        client.chat(HELLO, n_predict=1, grammar="root ::= undefined-rule")
    assert caught.value.status == 400
    assert str(caught.value).startswith(f"{client.url}/completion: HTTP 400: ")


class _StandIn(BaseHTTPRequestHandler):
    """Answers like llama-server on /props and /tokenize, and with a non-JSON page on /completion."""

    def do_GET(self) -> None:
        self._send(json.dumps({"chat_template": "{{ messages[0].content }}", "bos_token": "", "eos_token": ""}))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send("<html>busy</html>")

    def _send(self, body: str) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def test_bad_json_and_a_vanished_server_are_server_errors() -> None:
    stand_in = ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    threading.Thread(target=stand_in.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{stand_in.server_port}"
    try:
        client = LlamaServerClient(url)
        with pytest.raises(ServerError, match=rf"^{re.escape(url)}/completion: not valid JSON \(.*\): b'<html>busy"):
            client.chat(HELLO)
    finally:
        stand_in.shutdown()
        stand_in.server_close()
    with pytest.raises(ServerError, match=rf"^{re.escape(url)}/completion: the server did not answer: .*refused"):
        client.chat(HELLO)


# --- the docs' example ----------------------------------------------------------------------------------------------


def test_the_docs_example_runs(
    tiny_server: RunningServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each line the example prints is the comment under its print call in docs/llamacpp.md."""
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text("utf-8"), re.MULTILINE | re.DOTALL)
    assert blocks
    monkeypatch.setenv("LLAMA_SERVER_URL", tiny_server.url)
    namespace: dict[str, object] = {"__name__": "docs.llamacpp"}
    for block in blocks:
        exec(compile(block, "docs/llamacpp.md", "exec"), namespace)
    lines = [line for block in blocks for line in block.splitlines()]
    expected = [lines[i + 1].removeprefix("# ") for i, line in enumerate(lines[:-1]) if line.startswith("print(")]
    assert capsys.readouterr().out.splitlines() == expected
