"""`chatcaps serve` on loopback: the official `openai` client against the app over the tiny trained transformers model
(`--model`), every bad-input case, and a client that disconnects mid-stream. The app over a real llama-server is in
tests/serve/test_serve_llama_server.py.

The tiny model reproduces its training replies under greedy decoding, so these tests know the text exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from openai import BadRequestError, OpenAI
from serve_harness import INVALID, WEATHER_TOOL, check_event, chunks_of, normalised, serving

from chatcaps import ChatTemplate
from chatcaps.errors import ServerError, TemplateNotFoundError
from chatcaps.serve.app import create_app
from chatcaps.serve.local import LocalBackend
from chatcaps.serve.request import GenerationEnd, Sampling

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

HELLO: list[Any] = [{"role": "user", "content": "Hi there!"}]
TOOLS: list[Any] = [WEATHER_TOOL]
MAX_BODY = 64 * 1024
DEFAULT_REPORT = {
    "applied": [],
    "reasoning": {"intent": None, "mechanism": "default", "emitted": None, "exact": True, "note": "template default"},
    "unused_template_args": [],
    "warnings": [],
    "reply": {"finish": "complete", "warnings": []},
}
OFF_REPORT = {
    **DEFAULT_REPORT,
    "reasoning": {
        "intent": "off",
        "mechanism": "kwarg",
        "emitted": {"enable_thinking": False},
        "exact": True,
        "note": "",
    },
}


@pytest.fixture(scope="module")
def backend(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> LocalBackend:
    return LocalBackend(model, tokenizer, name="tiny")


@pytest.fixture(scope="module")
def url(backend: LocalBackend) -> Iterator[str]:
    with serving(create_app(backend, max_body_bytes=MAX_BODY)) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


# --- the openai client ------------------------------------------------------------------------------------------------


def test_completion(client: OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=HELLO)
    assert normalised(raw.http_response.json()) == {
        "id": "chatcmpl-*",
        "object": "chat.completion",
        "created": "*",
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello! How can I help?",
                    "reasoning_content": "The user greets me.",
                },
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 19, "total_tokens": 30},
        "chatcaps": DEFAULT_REPORT,
    }
    completion = raw.parse()
    assert completion.choices[0].message.content == "Hello! How can I help?"
    assert completion.choices[0].message.tool_calls is None


def test_stream_with_reasoning_effort(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=HELLO,
        stream=True,
        reasoning_effort="none",
        stream_options={"include_usage": True},
    )
    chunks = [chunk.model_dump(exclude_unset=True) for chunk in stream]
    assert chunks_of(chunks) == [
        {"role": "assistant", "content": ""},
        {"content": "Hello"},
        {"content": "!"},
        {"content": " How"},
        {"content": " can"},
        {"content": " I"},
        {"content": " help"},
        {"content": "?"},
        {"finish_reason": "stop", "chatcaps": OFF_REPORT},
        {"usage": {"prompt_tokens": 17, "completion_tokens": 8, "total_tokens": 25}},
    ]
    assert {chunk["id"] for chunk in chunks} == {chunks[0]["id"]}


def test_stream_reasoning(client: OpenAI) -> None:
    """The default (thinking) reply streams its reasoning as `reasoning_content` deltas, then the content."""
    stream = client.chat.completions.create(model="tiny", messages=HELLO, stream=True)
    chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in stream])
    reasoning = "".join(delta.get("reasoning_content", "") for delta in chunks)
    content = "".join(delta.get("content", "") or "" for delta in chunks)
    assert (reasoning, content) == ("The user greets me.", "Hello! How can I help?")
    assert chunks[-1] == {"finish_reason": "stop", "chatcaps": DEFAULT_REPORT}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tools(client: OpenAI, stream: bool) -> None:
    """Tools reach the template (the tiny model was not trained on them: its text is whatever it makes of them)."""
    create = client.chat.completions.create
    if stream:
        pieces = create(model="tiny", messages=HELLO, tools=TOOLS, max_tokens=24, stream=True)
        chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in pieces])
        assert chunks[0] == {"role": "assistant", "content": ""}
        assert all(set(delta) <= {"content", "reasoning_content", "tool_calls"} for delta in chunks[1:-1])
        last = chunks[-1]
    else:
        completion = create(model="tiny", messages=HELLO, tools=TOOLS, max_tokens=24).model_dump(exclude_unset=True)
        choice = completion["choices"][0]
        assert set(choice["message"]) <= {"role", "content", "reasoning_content", "tool_calls"}
        last = {"finish_reason": choice["finish_reason"], "chatcaps": completion["chatcaps"]}
    assert last["finish_reason"] in ("stop", "length", "tool_calls")
    assert last["chatcaps"]["reasoning"] == DEFAULT_REPORT["reasoning"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("stop", "content"),
    [("How", "Hello!"), (["can", "!"], "Hello"), ("Hello", ""), ("nowhere", "Hello! How can I help?")],
)
def test_stop(client: OpenAI, stream: bool, stop: str | list[str], content: str) -> None:
    """The text ends before the first stop string (held back while it might be one), finish_reason "stop"; the
    reply side strips the content's layout whitespace as ever."""
    create = client.chat.completions.create
    if stream:
        chunks = chunks_of(
            [
                c.model_dump(exclude_unset=True)
                for c in create(model="tiny", messages=HELLO, stop=stop, stream=True, reasoning_effort="none")
            ]
        )
        text = "".join(delta.get("content", "") for delta in chunks)
        finish = chunks[-1]["finish_reason"]
    else:
        choice = create(model="tiny", messages=HELLO, stop=stop, reasoning_effort="none").choices[0]
        text, finish = choice.message.content or "", choice.finish_reason
    assert (text, finish) == (content, "stop")


CONTINUED: list[Any] = [*HELLO, {"role": "assistant", "content": "", "reasoning_content": "The user"}]
"""An assistant message whose reasoning is unfinished: the prompt resumes inside the open `<think>` block."""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_continued_message_is_read_with_what_the_prompt_wrote(client: OpenAI, stream: bool) -> None:
    """`continue_final_message`: the reply is the prompt's part of the message and the model's continuation, read as
    one (the model generates only " greets me. ..."); streamed, the prompt's part is the first delta."""
    extra = {"continue_final_message": True, "add_generation_prompt": False}
    create = client.chat.completions.create
    if stream:
        pieces = create(model="tiny", messages=CONTINUED, stream=True, extra_body=extra)
        chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in pieces])
        assert chunks[:3] == [
            {"role": "assistant", "content": ""},
            {"reasoning_content": "The user"},
            {"reasoning_content": " greets"},
        ]
        fields = ("reasoning_content", "content")
        merged = {field: "".join(chunk.get(field, "") for chunk in chunks) for field in fields}
        assert merged == {"reasoning_content": "The user greets me.", "content": "Hello! How can I help?"}
    else:
        completion = create(model="tiny", messages=CONTINUED, extra_body=extra)
        assert completion.model_dump(exclude_unset=True)["choices"][0]["message"] == {
            "role": "assistant",
            "content": "Hello! How can I help?",
            "reasoning_content": "The user greets me.",
        }


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_reasoning_format_none_keeps_the_reasoning_in_content(client: OpenAI, stream: bool) -> None:
    """llama-server's `reasoning_format: "none"`: the text as generated, markers included, in `content`."""
    raw = "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"
    extra = {"reasoning_format": "none"}
    if stream:
        pieces = client.chat.completions.create(model="tiny", messages=HELLO, stream=True, extra_body=extra)
        chunks = chunks_of([chunk.model_dump(exclude_unset=True) for chunk in pieces])
        assert "".join(chunk.get("content", "") for chunk in chunks) == raw
        assert not any("reasoning_content" in chunk for chunk in chunks)
    else:
        completion = client.chat.completions.create(model="tiny", messages=HELLO, extra_body=extra)
        message = completion.model_dump(exclude_unset=True)["choices"][0]["message"]
        assert message == {"role": "assistant", "content": raw}


def test_models_and_health(url: str) -> None:
    models = httpx.get(f"{url}/v1/models").json()
    assert normalised(models) == {
        "object": "list",
        "data": [
            {
                "id": "tiny",
                "object": "model",
                "created": "*",
                "owned_by": "chatcaps",
                "type": "model",
                "display_name": "tiny",
                "created_at": "*",
                "lifecycle": "active",
            }
        ],
        "has_more": False,
        "first_id": "tiny",
        "last_id": "tiny",
    }
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}
    listed = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0).models.list()
    assert [model.id for model in listed] == ["tiny"]


def test_templates(backend: LocalBackend, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """One template, the tokenizer's (it has no tool_use template); a name it does not have is refused up front."""
    assert backend.template(tools=True) is backend.template(tools=False)
    assert backend.template(tools=False).source.text == tokenizer.chat_template
    with pytest.raises(TemplateNotFoundError):
        LocalBackend(model, tokenizer, name="tiny", template_name="tool_use")


def test_tool_use_template(model: PreTrainedModel) -> None:
    """A tokenizer with a "tool_use" template: requests with tools render with it, as in transformers."""
    from tiny_model import tiny_model_dir
    from transformers import AutoTokenizer

    named = AutoTokenizer.from_pretrained(tiny_model_dir())
    text = named.chat_template
    named.chat_template = {"default": text, "tool_use": "{# tools #}" + text}
    backend = LocalBackend(model, named, name="tiny")
    assert (backend.template(tools=False).source.text, backend.template(tools=True).source.text) == (
        text,
        "{# tools #}" + text,
    )
    pinned = LocalBackend(model, named, name="tiny", template_name="default")
    assert pinned.template(tools=True).source.text == text


# --- bad input ----------------------------------------------------------------------------------------------------


def _error(message: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": HELLO, **fields}


BAD_JSON: list[tuple[str, bytes, int, dict[str, Any]]] = [
    (
        "not JSON",
        b'{"messages": [',
        400,
        _error(
            "the request body is not valid JSON: unexpected end of data: line 1 column 15 (char 14)", "invalid_json"
        ),
    ),
    ("not an object", b"[1, 2]", 400, _error("the request body must be a JSON object, got list", "invalid_json")),
    ("a string", b'"hello"', 400, _error("the request body must be a JSON object, got str", "invalid_json")),
    (
        "over the limit",
        b'{"messages": "' + b"x" * MAX_BODY + b'"}',
        413,
        _error(f"the request body is over {MAX_BODY} bytes", "request_too_large"),
    ),
]
BAD_FIELDS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "no messages",
        {"model": "tiny"},
        _error("request.messages must be a list, got NoneType", "invalid_value", "messages"),
    ),
    (
        "bad role",
        _body(messages=[{"role": "wizard", "content": "Hi"}]),
        _error(
            "messages[0].role: unknown role 'wizard'; "
            "expected one of ['assistant', 'developer', 'system', 'tool', 'user']",
            "invalid_value",
            "messages[0].role",
        ),
    ),
    (
        "bad content",
        _body(messages=[{"role": "user", "content": "Hi"}, {"role": "user", "content": 42}]),
        _error(
            "messages[1].content: content must be a string, None or a list of blocks, got int",
            "invalid_value",
            "messages[1].content",
        ),
    ),
    (
        "bad reasoning_effort",
        _body(reasoning_effort="extreme"),
        _error(
            "request.reasoning_effort must be one of ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'], "
            "got 'extreme'",
            "invalid_value",
            "reasoning_effort",
        ),
    ),
    (
        "stream not a flag",
        _body(stream="yes"),
        _error("request.stream must be true or false, got 'yes'", "invalid_value", "stream"),
    ),
    ("two choices", _body(n=2), _error("request.n must be 1 (one choice per request), got 2", "invalid_value", "n")),
    (
        "max_tokens zero",
        _body(max_tokens=0),
        _error("request.max_tokens must be >= 1, got 0", "invalid_value", "max_tokens"),
    ),
    (
        "temperature text",
        _body(temperature="hot"),
        _error("request.temperature must be a number, got 'hot'", "invalid_value", "temperature"),
    ),
    (
        "response_format",
        _body(response_format={"type": "yaml"}),
        _error(
            'request.response_format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
            "\"json_schema\": {\"schema\": ...}}, got {'type': 'yaml'}",
            "invalid_value",
            "response_format",
        ),
    ),
    (
        "logprobs",
        _body(logprobs=True),
        _error("request.logprobs is not supported by chatcaps serve", "invalid_value", "logprobs"),
    ),
    (
        "penalty with --model",
        _body(presence_penalty=0.5),
        _error(
            "request.presence_penalty is not supported by chatcaps serve --model", "invalid_value", "presence_penalty"
        ),
    ),
    (
        "reasoning_format",
        _body(reasoning_format="deepseek-legacy"),
        _error(
            "request.reasoning_format must be one of ['auto', 'deepseek', 'none'], got 'deepseek-legacy'",
            "invalid_value",
            "reasoning_format",
        ),
    ),
    (
        "grammar with --model",
        _body(grammar='root ::= "Hi"'),
        _error("request.grammar is not supported by chatcaps serve --model", "invalid_value", "grammar"),
    ),
    (
        "grammar not a string",
        _body(grammar=["root"]),
        _error("request.grammar must be a string, got ['root']", "invalid_value", "grammar"),
    ),
    (
        "tool_choice required without tools",
        _body(tool_choice="required"),
        _error('tool_choice "required" without tools', "invalid_value", "tool_choice"),
    ),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_prompt_over_the_context(url: str, stream: bool) -> None:
    long = [{"role": "user", "content": "Hi " * 600}]
    response = httpx.post(f"{url}/v1/chat/completions", json=_body(messages=long, stream=stream))
    assert (response.status_code, response.json()) == (
        400,
        _error("the prompt has 1208 tokens; the model's context is 512", "invalid_value", "messages"),
    )


@pytest.mark.parametrize(("body", "status", "expected"), [case[1:] for case in BAD_JSON], ids=[c[0] for c in BAD_JSON])
def test_bad_body(url: str, body: bytes, status: int, expected: dict[str, Any]) -> None:
    response = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (status, expected)
    assert _served(url)


@pytest.mark.parametrize(("body", "expected"), [case[1:] for case in BAD_FIELDS], ids=[c[0] for c in BAD_FIELDS])
def test_bad_fields(url: str, body: dict[str, Any], expected: dict[str, Any]) -> None:
    response = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert (response.status_code, response.json()) == (400, expected)
    assert _served(url)


def test_defaults_of_unsupported_fields_are_accepted(url: str) -> None:
    body = _body(n=None, logprobs=False, top_logprobs=0, response_format={"type": "text"}, reasoning_effort="none")
    response = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert response.json()["choices"][0]["message"]["content"] == "Hello! How can I help?"


def test_bad_input_through_openai(client: OpenAI) -> None:
    """The client raises its own error with the server's message and param."""
    with pytest.raises(BadRequestError) as raised:
        wizard: list[Any] = [{"role": "wizard", "content": "Hi"}]
        client.chat.completions.create(model="tiny", messages=wizard)
    assert raised.value.param == "messages[0].role"
    assert raised.value.code == "invalid_value"


@pytest.mark.parametrize(
    ("method", "path", "status", "expected"),
    [
        ("GET", "/v1/completions", 404, _error("GET /v1/completions: Not Found", "not_found")),
        (
            "GET",
            "/v1/chat/completions",
            405,
            _error("GET /v1/chat/completions: Method Not Allowed", "method_not_allowed"),
        ),
    ],
)
def test_unknown_routes(url: str, method: str, path: str, status: int, expected: dict[str, Any]) -> None:
    response = httpx.request(method, f"{url}{path}")
    assert (response.status_code, response.json()) == (status, expected)


def _served(url: str) -> bool:
    """The server still answers a good request after a bad one."""
    reply = httpx.post(f"{url}/v1/chat/completions", json=_body(reasoning_effort="none")).json()
    return bool(reply["choices"][0]["message"]["content"] == "Hello! How can I help?")


# --- disconnects --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rambling(tokenizer: PreTrainedTokenizerBase) -> LocalBackend:
    """The tiny architecture with random weights: it does not stop on its own, so a stopped generation shows."""
    import torch
    from tiny_model import MODEL_CONFIG
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(1)
        config = Qwen2Config(vocab_size=len(tokenizer), **MODEL_CONFIG)
        model = Qwen2ForCausalLM(config)
    model.eval()  # type: ignore[no-untyped-call]
    return LocalBackend(model, tokenizer, name="rambling")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_disconnect_stops_generation(rambling: LocalBackend, stream: bool) -> None:
    limit = 400
    rambling.last = None
    with serving(create_app(rambling)) as base:
        body = _body(max_tokens=limit, reasoning_effort="none", stream=stream)
        with httpx.Client(timeout=60) as http:
            if stream:
                with http.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
                    lines = response.iter_lines()
                    assert next(lines).startswith("data: ")
            else:
                with pytest.raises(httpx.ReadTimeout):
                    http.post(f"{base}/v1/chat/completions", json=body, timeout=0.3)
        _wait(lambda: rambling.last is not None and not rambling.busy)
        last = rambling.last
        assert isinstance(last, GenerationEnd)
        assert last.finish_reason == "length"
        assert last.completion_tokens < limit
        full = httpx.post(f"{base}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 3}, timeout=60)
        assert full.json()["usage"]["completion_tokens"] == 3


def _wait(condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the generation did not stop"
        time.sleep(0.02)


# --- the command line ---------------------------------------------------------------------------------------------


def test_cli_upstream_down(capsys: pytest.CaptureFixture[str]) -> None:
    """With nothing at the upstream's address, `chatcaps serve` stops before listening, saying why."""
    from llama_server_harness import free_port

    from chatcaps.cli import EXIT_ERROR, main

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["serve", "--upstream", url]) == EXIT_ERROR
    error = capsys.readouterr().err
    assert error.startswith(f"chatcaps: error: ServerError: {url}/props: the server did not answer: ")


def test_cli_needs_one_model(capsys: pytest.CaptureFixture[str]) -> None:
    from chatcaps.cli import EXIT_USAGE, main

    assert main(["serve"]) == EXIT_USAGE
    assert main(["serve", "--upstream", "http://127.0.0.1:1", "--model", "folder"]) == EXIT_USAGE
    assert "one of the arguments --upstream --model is required" in capsys.readouterr().err


# --- tool_choice ----------------------------------------------------------------------------------------------------


def test_tool_choice_reaches_a_template_that_reads_it() -> None:
    from chatcaps import ChatTemplate
    from chatcaps.request import ChatRequest, ToolChoice
    from chatcaps.serve.pipeline import with_tool_choice

    reads = ChatTemplate.from_str(
        "{% for m in messages %}{{ m.content }}{% endfor %}{% if tool_choice %}[{{ tool_choice }}]{% endif %}"
    )
    request = ChatRequest(HELLO, template_args={"x": 1}, tool_choice=ToolChoice("required", "'required'"))
    assert with_tool_choice(request, reads.caps).template_args == {"tool_choice": "required", "x": 1}
    free = ChatRequest(HELLO, template_args={"x": 1})
    assert with_tool_choice(free, reads.caps) is free


def test_chatcaps_does_not_import_the_server() -> None:
    """starlette and uvicorn (the serve extra) are imported by `chatcaps serve`, not by `chatcaps` or its CLI."""
    import subprocess
    import sys

    code = "import sys, chatcaps, chatcaps.cli; print(sorted({'starlette', 'uvicorn', 'anyio'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


# --- what the app sends is OpenAI's shape -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "refused"),
    [
        (b'data: {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}', False),
        (b"data: [DONE]", False),
        (b": ping", False),
        (b'data: {"error": {"message": "m", "type": "t", "param": null, "code": null}}', False),
        (b'data: {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []}', True),
        (b'data: {"id": "x", "object": "chat.completion.chunk", "created": "1", "model": "m", "choices": []}', True),
        (b'data: {"error": {"message": "m"}}', True),
        (b"event: x", True),
    ],
)
def test_the_harness_refuses_what_openai_refuses(sent: bytes, refused: bool) -> None:
    """The check every served response goes through (serve_harness.Validated) is not a formality."""
    check_event("POST /v1/chat/completions", sent)
    found, INVALID[:] = list(INVALID), []
    assert bool(found) is refused


# --- failures, whole and midway: one table ------------------------------------------------------------------------


class _FailingBackend:
    """The tiny model's template, and a generation that writes a little and then fails with `error`."""

    model = "failing"
    grammars: str | None = None
    lazy_grammars = False

    def __init__(self, backend: LocalBackend, error: Exception) -> None:
        self.backend = backend
        self.error = error

    def template(self, *, tools: bool) -> ChatTemplate:
        return self.backend.template(tools=tools)

    def check(self, sampling: Sampling) -> None:
        return None

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        yield "<think>\nThe"
        raise self.error

    async def count_tokens(self, text: str) -> int:
        return await self.backend.count_tokens(text)

    async def aclose(self) -> None:
        return None


UPSTREAM_400 = ServerError("HTTP 400: no", url="http://upstream/completion", status=400)
UPSTREAM_BODY = {
    "error": {
        "message": "upstream http://upstream/completion: HTTP 400: no",
        "type": "upstream_error",
        "param": None,
        "code": "upstream_error",
        "upstream_status": 400,
    }
}
INTERNAL_BODY = {
    "error": {"message": "internal error: broken", "type": "server_error", "param": None, "code": "internal_error"}
}


@pytest.mark.parametrize(
    ("error", "status", "body"),
    [(UPSTREAM_400, 502, UPSTREAM_BODY), (RuntimeError("broken"), 500, INTERNAL_BODY)],
    ids=["upstream", "internal"],
)
def test_a_failure_midway(backend: LocalBackend, error: Exception, status: int, body: dict[str, Any]) -> None:
    """Whole, the failure is the response; streamed, the text so far has gone out and the same body is the last
    event (no `[DONE]`)."""
    with serving(create_app(_FailingBackend(backend, error))) as base:
        whole = httpx.post(f"{base}/v1/chat/completions", json=_body())
        assert (whole.status_code, whole.json()) == (status, body)
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=_body(stream=True)) as response:
            events = [line.removeprefix("data: ") for line in response.iter_lines() if line]
    assert response.status_code == 200
    chunks = [json.loads(event) for event in events]
    assert chunks_of(chunks[:-1]) == [{"role": "assistant", "content": ""}, {"reasoning_content": "The"}]
    assert chunks[-1] == body
