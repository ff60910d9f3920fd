"""The playground's JSON endpoints over a real server on loopback: the Caps, the render (prompt, marked pieces,
report) and a reply read back for a small hand-written template; paths outside the allowed folders refused by name;
a pasted template's syntax error pointed at; a hostile one stopped by the sandbox's limits while the server goes on
answering. The page itself is exercised in a real browser by tests/browser/test_playground.py."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from paths import DATA
from serve_harness import WEATHER_TOOL, Canned, serving

from chatcaps import ChatTemplate, Limits
from chatcaps.defaults import PLAYGROUND_TEMPLATE_CHARS
from chatcaps.serve.app import create_app, create_playground_app
from chatcaps.zoo import MANIFEST_COLUMNS

FOLDER = DATA / "playground"
TEMPLATE = (FOLDER / "tools.jinja").read_text(encoding="utf-8")
"""ChatML turns, tools as JSON lines in a system turn, calls in `<tool_call>` tags."""
PASTED = {"text": TEMPLATE, "eos_token": "<|im_end|>"}
REQUEST: dict[str, Any] = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER_TOOL]}
TOOL_JSON = (
    '{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": '
    '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}'
)
CALL_REPLY = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><|im_end|>'
ENDLESS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
"""Ten billion loop steps, each within the sandbox's `max_range`: only the time limit stops it."""


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """The playground alone, serving no template, reading files under tests/data/playground."""
    with serving(create_playground_app(None, folders=[FOLDER])) as base, httpx.Client(base_url=base, timeout=30) as c:
        yield c


def test_the_page_is_at_the_root_of_chatcaps_serve_beside_the_api() -> None:
    with serving(create_app(Canned(), playground_dirs=[FOLDER])) as base:
        page = httpx.get(f"{base}/", timeout=30)
        health = httpx.get(f"{base}/health", timeout=30)
        models = httpx.get(f"{base}/v1/models", timeout=30)
        offered = httpx.get(f"{base}/playground/templates", timeout=30)
        hello = [{"role": "user", "content": "Hi"}]
        body = {"template": {"served": True}, "request": {"messages": hello}}
        served = httpx.post(f"{base}/playground/render", json=body, timeout=30)
    assert (page.status_code, page.headers["content-type"]) == (200, "text/html; charset=utf-8")
    assert "<title>chatcaps playground</title>" in page.text
    assert (health.json(), models.json()["data"][0]["id"]) == ({"status": "ok"}, "canned")
    assert offered.json() == {"served": "tiny.jinja", "folders": [str(FOLDER)], "files": [str(FOLDER / "tools.jinja")]}
    assert served.json()["prompt"] == Canned().template(tools=False).render(hello).prompt


def test_with_a_key_the_page_opens_and_its_endpoints_want_the_key() -> None:
    with serving(create_app(Canned(), api_key="sesame")) as base:
        page = httpx.get(f"{base}/", timeout=30)
        refused = httpx.get(f"{base}/playground/templates", timeout=30)
        let_in = httpx.get(f"{base}/playground/templates", headers={"Authorization": "Bearer sesame"}, timeout=30)
    assert (page.status_code, refused.status_code, let_in.status_code) == (200, 401, 200)
    assert refused.json()["error"]["code"] == "invalid_api_key"


def test_the_templates_offered_are_the_files_under_the_allowed_folders(client: httpx.Client) -> None:
    assert client.get("/playground/templates").json() == {
        "served": None,
        "folders": [str(FOLDER)],
        "files": [str(FOLDER / "tools.jinja")],
    }


def test_caps_of_a_file_are_what_detect_json_gives(client: httpx.Client) -> None:
    answer = client.post("/playground/caps", json={"template": {"path": "tools.jinja"}})
    path = str(FOLDER / "tools.jinja")
    assert answer.status_code == 200
    assert answer.json() == {
        "template": {
            "name": path,
            "origin": "file",
            "sha256": ChatTemplate.from_file(path).source.sha256,
            "engine": "jinja2",
            "bos_token": "",
            "eos_token": "",
        },
        "caps": ChatTemplate.from_file(path).caps.to_dict(),
    }


def test_render_marks_the_special_tokens_and_the_generation_prompt(client: httpx.Client) -> None:
    body = {"template": PASTED, "request": REQUEST, "special_tokens": ["<|im_start|>"]}
    answer = client.post("/playground/render", json=body)
    system = f"system\n# Tools\n{TOOL_JSON}\n"
    assert answer.status_code == 200
    assert answer.json() == {
        "template": {
            "name": "<pasted>",
            "origin": "str",
            "sha256": ChatTemplate(TEMPLATE).source.sha256,
            "engine": "jinja2",
            "bos_token": "",
            "eos_token": "<|im_end|>",
        },
        "prompt": f"<|im_start|>{system}<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n",
        "pieces": [
            {"text": "<|im_start|>", "special": True, "generation": False},
            {"text": system, "special": False, "generation": False},
            {"text": "<|im_end|>", "special": True, "generation": False},
            {"text": "\n", "special": False, "generation": False},
            {"text": "<|im_start|>", "special": True, "generation": False},
            {"text": "user\nWeather in Paris?", "special": False, "generation": False},
            {"text": "<|im_end|>", "special": True, "generation": False},
            {"text": "\n", "special": False, "generation": False},
            {"text": "<|im_start|>", "special": True, "generation": True},
            {"text": "assistant\n", "special": False, "generation": True},
        ],
        "special_tokens": ["<|im_start|>", "<|im_end|>"],
        "report": {
            "messages": REQUEST["messages"],
            "template_kwargs": {
                "tools": [WEATHER_TOOL],
                "add_generation_prompt": True,
                "continue_final_message": False,
                "bos_token": "",
                "eos_token": "<|im_end|>",
            },
            "applied": [],
            "reasoning": {
                "intent": None,
                "mechanism": "default",
                "emitted": None,
                "exact": True,
                "note": "template default",
            },
            "unused_template_args": [],
            "generation_prompt": "<|im_start|>assistant\n",
            "starts_in_reasoning": False,
            "reasoning_markers": {"start": None, "end": None},
            "warnings": [],
        },
    }


def test_render_reports_unused_kwargs_and_the_intent_against_what_was_emitted(client: httpx.Client) -> None:
    request = {**REQUEST, "reasoning_effort": "low", "chat_template_kwargs": {"nobody_reads": 1}}
    report = client.post("/playground/render", json={"template": PASTED, "request": request}).json()["report"]
    assert (report["reasoning"], report["unused_template_args"], report["warnings"]) == (
        {
            "intent": "low",
            "mechanism": "none",
            "emitted": None,
            "exact": False,
            "note": "the template has no reasoning",
        },
        ["nobody_reads"],
        [],
    )


def test_a_reply_with_a_tool_call_is_read_whole_and_streamed(client: httpx.Client) -> None:
    body = {"template": PASTED, "request": REQUEST, "reply": CALL_REPLY, "chunk_chars": 20}
    answer = client.post("/playground/reply", json=body)
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    assert answer.status_code == 200
    assert answer.json() == {
        "choice": {
            "index": 0,
            "message": {"role": "assistant", "content": None, "tool_calls": [call]},
            "finish_reason": "tool_calls",
        },
        "warnings": [],
        "stream": {
            "initial": [{"role": "assistant", "content": ""}],
            "fed": [
                {"text": '<tool_call>{"name": ', "deltas": []},
                {"text": '"get_weather", "argu', "deltas": []},
                {"text": 'ments": {"city": "Pa', "deltas": []},
                {"text": 'ris"}}</tool_call><|', "deltas": [{"tool_calls": [{"index": 0, **call}]}]},
                {"text": "im_end|>", "deltas": []},
            ],
            "close": [],
        },
    }


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../../../../../../etc/passwd", str(FOLDER.parent / "constrained_request.json")]
)
def test_a_path_outside_the_allowed_folders_is_refused_by_name(client: httpx.Client, path: str) -> None:
    answer = client.post("/playground/caps", json={"template": {"path": path}})
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "error": {
                "message": f"{path}: not a file under the folders this server may read: {FOLDER}",
                "type": "invalid_request_error",
                "param": "template.path",
                "code": "invalid_value",
            }
        },
    )


def test_a_link_out_of_an_allowed_folder_is_refused(tmp_path: Path) -> None:
    allowed, secret = tmp_path / "allowed", tmp_path / "secret.jinja"
    allowed.mkdir()
    secret.write_text("{{ 'secret' }}", encoding="utf-8")
    (allowed / "link.jinja").symlink_to(secret)
    with serving(create_playground_app(None, folders=[allowed])) as base:
        answer = httpx.post(f"{base}/playground/caps", json={"template": {"path": "link.jinja"}}, timeout=30)
        offered = httpx.get(f"{base}/playground/templates", timeout=30).json()
    assert (answer.status_code, answer.json()["error"]["param"]) == (400, "template.path")
    assert answer.json()["error"]["message"].startswith("link.jinja: not a file under the folders")
    assert offered["files"] == [str(allowed.resolve() / "link.jinja")]  # listed, as the folder holds it; never read


def test_a_file_that_holds_no_template_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text('{"bos_token": "<s>"}', encoding="utf-8")
    with serving(create_playground_app(None, folders=[tmp_path])) as base:
        body = {"template": {"path": "tokenizer_config.json"}}
        answer = httpx.post(f"{base}/playground/caps", json=body, timeout=30)
    assert (answer.status_code, answer.json()["error"]["param"]) == (400, "template.path")
    assert answer.json()["error"]["message"].startswith("tokenizer_config.json: ")


def test_a_zoo_file_has_its_manifests_tokens(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "chatml.jinja").write_text(TEMPLATE, encoding="utf-8")
    row = ["chatml.jinja", "org/model", "", "", "", "", "<s>", "<|im_end|>", ""]
    (tmp_path / "MANIFEST.tsv").write_text("\t".join(MANIFEST_COLUMNS) + "\n" + "\t".join(row) + "\n")
    with serving(create_playground_app(None, folders=[tmp_path])) as base:
        answer = httpx.post(
            f"{base}/playground/caps", json={"template": {"path": "templates/chatml.jinja"}}, timeout=30
        )
    about = answer.json()["template"]
    assert (about["bos_token"], about["eos_token"], answer.json()["caps"]["end_of_turn"]) == (
        "<s>",
        "<|im_end|>",
        "<|im_end|>",
    )


@pytest.mark.parametrize(
    ("template", "message", "param"),
    [
        ({"served": True}, "this server serves no template: pick a file or paste one", "template.served"),
        (
            {"text": "x" * (PLAYGROUND_TEMPLATE_CHARS + 1)},
            f"the template is over the playground's {PLAYGROUND_TEMPLATE_CHARS} characters",
            "template.text",
        ),
        (
            {"text": "x", "path": "tools.jinja"},
            'template must be an object with one of "served": true, "path": FILE or "text": TEMPLATE, got '
            "{'path': 'tools.jinja', 'text': 'x'}",
            "template",
        ),
    ],
)
def test_a_template_that_cannot_be_had_is_an_input_error(
    client: httpx.Client, template: dict[str, Any], message: str, param: str
) -> None:
    answer = client.post("/playground/caps", json={"template": template})
    assert (answer.status_code, answer.json()) == (
        400,
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": "invalid_value"}},
    )


def test_bad_request_fields_name_the_message_and_field(client: httpx.Client) -> None:
    request = {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": 5}]}
    answer = client.post("/playground/render", json={"template": PASTED, "request": request})
    assert (answer.status_code, answer.json()["error"]["param"]) == (400, "messages[1].content")


def test_a_pasted_template_that_does_not_parse_is_pointed_at(client: httpx.Client) -> None:
    text = "{% for m in messages %}\n{{ m.content }\n{% endfor %}"
    answer = client.post("/playground/render", json={"template": {"text": text}, "request": REQUEST})
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "error": {
                "message": "the chat template failed on this request: <pasted>:2:14: unexpected '}'",
                "type": "invalid_request_error",
                "param": None,
                "code": "template_error",
                "template": {"name": "<pasted>", "line": 2, "source_line": "{{ m.content }", "span": [13, 14]},
            }
        },
    )


def test_a_hostile_template_ends_within_the_limit_and_the_server_answers_meanwhile(client: httpx.Client) -> None:
    limit = Limits().time_s
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        hostile = pool.submit(client.post, "/playground/caps", json={"template": {"text": ENDLESS}})
        time.sleep(0.3)  # the endless render has begun
        during = client.post("/playground/caps", json={"template": {"path": "tools.jinja"}})
        answered_during = time.monotonic() - started
        answer = hostile.result()
        took = time.monotonic() - started
    assert (during.status_code, answered_during < limit) == (200, True)
    assert limit <= took < limit + 3
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "template_error")
    assert answer.json()["error"]["message"] == (
        "the chat template failed on this request: render ran past time_s=2.0 (probe 'generation_prompt'; detection "
        "stops at the first limit)"
    )
    after = client.post("/playground/render", json={"template": PASTED, "request": REQUEST})
    assert after.status_code == 200


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{% for i in range(10**9) %}x{% endfor %}", "range of 1000000000 items, over max_range=100000"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nested deeper than max_recursion=64"),
        (
            "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
            "output exceeded max_output_chars=33554432",
        ),
    ],
)
def test_a_hostile_template_is_refused_by_the_sandbox(client: httpx.Client, text: str, message: str) -> None:
    answer = client.post("/playground/caps", json={"template": {"text": text}})
    assert (answer.status_code, answer.json()["error"]["message"]) == (
        400,
        f"the chat template failed on this request: {message} (probe 'generation_prompt'; detection stops at the "
        "first limit)",
    )
