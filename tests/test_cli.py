"""The `chatcaps` command, run in-process (`main(argv)`) and once as the installed entry point, against real sources:
template files, model folders, tokenizer configs, GGUF files, a Hugging Face cache and a server on loopback."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pty
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import cache_repo, serve_props, write_folder, write_gguf
from huggingface_hub import constants

from chatcaps import ChatTemplate, detect_caps
from chatcaps.cli import main
from chatcaps.contexts import load_context, load_contexts
from chatcaps.engines import EngineName
from chatcaps.matrix import caps_rows
from chatcaps.zoo import MANIFEST_COLUMNS

ROOT = Path(__file__).parents[1]
CONTEXTS = ROOT / "src" / "chatcaps" / "contexts"
CHATCAPS = Path(sys.executable).parent / "chatcaps"
TEMPLATE = (
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    "{% if tools %}{{ tools|length }} tools\n{% endif %}"
)
SOURCE_TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}"
THINK = (
    "{%- for m in messages -%}\n"
    "<|{{ m.role }}|>{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}\n"
    "{% endfor -%}\n"
    "{%- if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}\n"
)
PLAIN = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
TOOLS_CONFIG = {
    "bos_token": "<s>",
    "chat_template": "{{ bos_token }}{% if tools %}{% for t in tools %}"
    "{{ t.function.name }}: {{ t.function.description }}\n{% endfor %}{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}",
}
# Renders alike on both engines, whatever the context.
AGREE = '{% for m in messages %}{{ m.role }}: {{ m.content if m.content is string else "" }}\n{% endfor %}'
# jinja2's |safe makes a Markup, and Markup + str HTML-escapes the str; minijinja concatenates (docs/engines.md).
MARKUP = '{% for m in messages %}{{ m.role }}{{ (" "|safe + "<r>") if m.role == "tool" else "" }}\n{% endfor %}'
# Loops over tools unguarded: jinja2 cannot iterate the None transformers passes, minijinja can (docs/engines.md).
NONE_TOOLS = "{% for t in tools %}{{ t.function.name }}\n{% endfor %}{% for m in messages %}{{ m.role }}\n{% endfor %}"
USER = [{"role": "user", "content": "Hi"}]
COMMIT = "c" * 40

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`chatcaps ARGS...` in-process: (exit code, stdout, stderr)."""
    monkeypatch.delenv("COLUMNS", raising=False)

    def run(*argv: object) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(arg) for arg in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def write(folder: Path, name: str, content: object) -> Path:
    """One file: text as is, anything else as JSON."""
    return write_folder(folder, {name: content}) / name


def table_rows(text: str) -> list[list[str]]:
    """The cells of every body row of the rich tables in `text`."""
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]


# --- every source kind --------------------------------------------------------------------------------------------


@pytest.fixture
def props() -> Iterator[tuple[str, dict[str, Any]]]:
    served: dict[str, Any] = {}
    with serve_props(served) as url:
        yield url, served


def make_source(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: tuple[str, dict[str, Any]]) -> str:
    """SOURCE for `kind`, holding SOURCE_TEMPLATE with bos "<s>" and eos "</s>" (a bare file has no tokens)."""
    config = {"chat_template": SOURCE_TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"}
    if kind == "file":
        return str(write(tmp_path, "t.jinja", SOURCE_TEMPLATE))
    if kind == "folder":
        tokens = {"bos_token": "<s>", "eos_token": "</s>"}
        return str(
            write_folder(tmp_path / "model", {"chat_template.jinja": SOURCE_TEMPLATE, "tokenizer_config.json": tokens})
        )
    if kind == "tokenizer_config":
        return str(write(tmp_path, "tokenizer_config.json", config))
    if kind == "gguf":
        return str(write_gguf(tmp_path / "m.gguf", SOURCE_TEMPLATE))
    if kind == "hub":
        cache_repo(tmp_path / "hub", "org/model", {"tokenizer_config.json": json.dumps(config)}, commit=COMMIT)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
        return "org/model"
    url, served = server
    served.update(config)
    return url


SOURCE_KINDS = ["file", "folder", "tokenizer_config", "gguf", "hub", "llama_server"]
ORIGINS = {"folder": "dir"}


@pytest.mark.parametrize("kind", SOURCE_KINDS)
def test_every_source_kind_detects_and_renders(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, props: tuple[str, dict[str, Any]], run: Run
) -> None:
    source = make_source(kind, tmp_path, monkeypatch, props)
    bos, eos = ("", "") if kind == "file" else ("<s>", "</s>")
    messages = write(tmp_path, "m.json", [{"role": "user", "content": "Zq7User1"}])
    assert run("detect", source, "--json") == (
        0,
        detect_caps(SOURCE_TEMPLATE, bos_token=bos, eos_token=eos).to_json().decode() + "\n",
        "",
    )
    code, out, _ = run("detect", source)
    rows = table_rows(out)
    assert (code, rows[1], rows[2], rows[3]) == (
        0,
        ["origin", ORIGINS.get(kind, kind)],
        ["bos_token", f'"{bos}"'],
        ["eos_token", f'"{eos}"'],
    )
    assert run("render", source, "--messages", messages) == (0, f"{bos}[user]Zq7User1{eos}\n", "")
    assert run("render", source, "--messages", messages, "--bos", "<B>", "--eos", "<E>") == (
        0,
        "<B>[user]Zq7User1<E>\n",
        "",
    )


def test_name_picks_a_named_template(tmp_path: Path, run: Run) -> None:
    named = [{"name": "default", "template": PLAIN}, {"name": "tool_use", "template": SOURCE_TEMPLATE}]
    config = write(tmp_path, "tokenizer_config.json", {"chat_template": named, "bos_token": "<s>"})
    folder = write_folder(
        tmp_path / "model", {"chat_template.jinja": PLAIN, "additional_chat_templates/tool_use.jinja": SOURCE_TEMPLATE}
    )
    gguf_file = write_gguf(tmp_path / "m.gguf", named)
    messages = write(tmp_path, "m.json", USER)
    assert run("render", config, "--messages", messages) == (0, "user: Hi\n", "")
    assert run("render", config, "--messages", messages, "--name", "tool_use") == (0, "<s>[user]Hi\n", "")
    assert run("render", folder, "--messages", messages, "--name", "tool_use") == (0, "[user]Hi\n", "")
    assert run("render", gguf_file, "--messages", messages, "--name", "tool_use") == (0, "<s>[user]Hi</s>\n", "")
    code, out, err = run("render", config, "--messages", messages, "--name", "rag")
    assert (code, out) == (3, "")
    assert err == (
        f"chatcaps: error: TemplateNotFoundError: {config}: no chat template named 'rag'; "
        "it has 'default', 'tool_use'\n"
    )


def test_hub_revision_picks_a_cached_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run) -> None:
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": PLAIN}, commit="a" * 40)
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": SOURCE_TEMPLATE}, commit="b" * 40, ref=None)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    messages = write(tmp_path, "m.json", USER)
    assert run("render", "org/model", "--messages", messages) == (0, "user: Hi\n", "")
    assert run("render", "org/model", "--revision", "b" * 40, "--messages", messages) == (0, "[user]Hi\n", "")


def test_hub_repo_missing_from_the_cache_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run) -> None:
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    code, out, err = run("detect", "org/absent")
    assert (code, out) == (3, "")
    assert err == (
        f"chatcaps: error: TemplateNotFoundError: org/absent@main: not in the Hugging Face cache ({tmp_path}) and "
        "HF_HUB_OFFLINE is set; looked for chat_template.jinja, chat_template.json, additional_chat_templates/*.jinja, "
        "tokenizer_config.json (key 'chat_template'). Download the repo first (`hf download org/absent`) or set "
        "HF_HUB_OFFLINE=0.\n"
    )


def test_installed_entry_point_reads_the_hub_cache_from_the_environment(tmp_path: Path) -> None:
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": THINK}, commit=COMMIT)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1", "CHATCAPS_CACHE_DIR": ""}
    done = subprocess.run([CHATCAPS, "detect", "org/model", "--json"], capture_output=True, env=env, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, detect_caps(THINK).to_json() + b"\n", b"")
    done = subprocess.run([CHATCAPS, "render", "org/model"], capture_output=True, env=env, check=False)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr == (
        b"chatcaps render: error: the following arguments are required: --messages (see chatcaps render --help)\n"
    )


# --- detect -------------------------------------------------------------------------------------------------------


def test_detect_tables_show_every_field(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "think.jinja", THINK)
    code, out, err = run("detect", template, "--engine", "minijinja")
    assert (code, err) == (0, "")
    rows = table_rows(out)
    fields = {row[0]: row[1] for row in rows if len(row) == 2}
    caps = detect_caps(THINK, engine="minijinja")
    assert list(fields) == ["source", "origin", "bos_token", "eos_token", *(name for name, _ in caps_rows(caps))]
    assert fields["source"] == str(template)
    assert fields["engine"] == '"minijinja"'
    assert fields["roles.system"] == "true"
    assert fields["reasoning.start_marker"] == '"<think>"'
    assert fields["reasoning.end_marker"] == '"</think>"'
    assert fields["reasoning.default_state"] == '"free"'
    assert fields["generation_prompt"] == '"<|assistant|>"'
    assert fields["template_variables"] == '["enable_thinking"]'
    assert [
        "enable_thinking",
        "bool",
        "toggle",
        "false, true",
        "true",
        "false: closed, history all; true: free, history all",
    ] in rows
    assert out.endswith("probe_errors: none\n")


def test_detect_response_template_prints_the_reply_grammar(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "think.jinja", THINK)
    code, out, err = run("detect", template, "--response-template")
    assert (code, err) == (0, "")
    assert orjson.loads(out) == ChatTemplate.from_file(template).response_template()
    assert orjson.loads(out)["fields"]["reasoning_content"]["close"] == "</think>"
    code, _, err = run("detect", template, "--response-template", "--json")
    assert code == 2
    assert "not allowed with argument" in err


def test_detect_tables_list_probe_errors_and_show_markup_as_text(tmp_path: Path, run: Run) -> None:
    text = (
        "{{ raise_exception('[b]Zq7 no system[/b]') if messages[0].role == 'system' }}"
        "{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    template = write(tmp_path, "t.jinja", text)
    code, out, _ = run("detect", template)
    assert code == 0
    errors = detect_caps(text).probe_errors
    assert errors
    assert [row for row in table_rows(out) if row[1] == "[b]Zq7 no system[/b]"] == [
        [error.probe, error.error] for error in errors
    ]
    assert "reasoning.controls: none" in out


def test_detect_a_template_that_does_not_parse_exits_3(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "broken.jinja", "{% if x %}")
    code, out, err = run("detect", template)
    assert (code, out) == (3, "")
    jinja2_says = (
        "Unexpected end of template. Jinja was looking for the following tags: 'elif' or 'else' or 'endif'. The "
        "innermost block that needs to be closed is 'if'."
    )
    pointer = "  1 | {% if x %}\n    |         ^^\n"  # under the message: the line, the offending end underlined
    assert err == f"chatcaps: error: TemplateSyntaxError: {template}:1:9: {jinja2_says}\n{pointer}"


# --- render -------------------------------------------------------------------------------------------------------


def test_render_reasoning_intent_on_a_thinking_template(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "think.jinja", THINK)
    messages = write(tmp_path, "m.json", USER)
    assert run("render", template, "--messages", messages, "--reasoning", "off") == (
        0,
        "<|user|>Hi\n<|assistant|><think></think>\n",
        "",
    )
    assert run("render", template, "--messages", messages, "--reasoning", "on") == (
        0,
        "<|user|>Hi\n<|assistant|>\n",
        "",
    )
    assert run("render", template, "--messages", messages, "--arg", "enable_thinking=false") == (
        0,
        "<|user|>Hi\n<|assistant|><think></think>\n",
        "",
    )
    code, out, _ = run("render", template, "--messages", messages, "--reasoning", "0", "--json")
    assert (code, json.loads(out)["prompt"]) == (0, "<|user|>Hi\n<|assistant|><think></think>")
    assert json.loads(out)["reasoning"] == {
        "intent": 0,
        "mechanism": "kwarg",
        "emitted": {"enable_thinking": False},
        "exact": True,
        "note": "a budget of 0 means off",
    }


def test_render_report_goes_to_stderr(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "think.jinja", THINK)
    history = [
        *USER,
        {"role": "assistant", "content": "Hello", "reasoning": "R1"},
        {"role": "user", "content": "Again"},
    ]
    messages = write(tmp_path, "m.json", history)
    code, out, err = run(
        "render", template, "--messages", messages, "--reasoning", "off", "--arg", "foo=bar", "--report"
    )
    assert (code, out) == (
        0,
        "<|user|>Hi\n<|assistant|><think>R1</think>Hello\n<|user|>Again\n<|assistant|><think></think>\n",
    )
    assert err == (
        "applied:\n"
        "  - normalise: messages[1]: reasoning -> reasoning_content\n"
        "reasoning:\n"
        '  intent: "off"\n'
        '  mechanism: "kwarg"\n'
        '  emitted: {"enable_thinking":false}\n'
        "  exact: true\n"
        '  note: ""\n'
        'unused_template_args: ["foo"]\n'
        'generation_prompt: "<|assistant|><think></think>"\n'
        "starts_in_reasoning: false\n"
        'reasoning_markers: {"start":"<think>","end":"</think>"}\n'
        "warnings: []\n"
    )


def test_render_json_is_the_render_result(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "think.jinja", THINK)
    messages = write(tmp_path, "m.json", USER)
    args_file = write(tmp_path, "args.json", {"foo": 1, "enable_thinking": True})
    code, out, err = run(
        "render",
        template,
        "--messages",
        messages,
        "--template-args",
        args_file,
        "--arg",
        "foo=x y",
        "--report",
        "--json",
    )
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert list(data) == sorted(
        [
            "prompt",
            "messages",
            "template_kwargs",
            "applied",
            "reasoning",
            "unused_template_args",
            "generation_prompt",
            "starts_in_reasoning",
            "reasoning_markers",
            "warnings",
        ]
    )
    expected = ChatTemplate(THINK).render(USER, template_args={"foo": "x y", "enable_thinking": True})
    assert data == orjson.loads(orjson.dumps(expected.to_dict()))
    assert data["unused_template_args"] == ["foo"]
    assert data["template_kwargs"]["foo"] == "x y"
    inline = run(
        "render",
        template,
        "--messages",
        messages,
        "--template-args",
        '{"foo": "x y", "enable_thinking": true}',
        "--json",
    )
    assert inline == (0, out, "")


def test_render_without_polyfills_is_render_raw(tmp_path: Path, run: Run) -> None:
    """Every canonical context through `--no-polyfills` gives exactly `render_raw`'s prompt."""
    template = write(tmp_path, "think.jinja", THINK)
    chat = ChatTemplate(THINK)
    for path in sorted(CONTEXTS.glob("*.json")):
        context = load_context(path)
        code, out, err = run("render", template, "--messages", path, "--no-polyfills", "--json")
        assert (code, err) == (0, "")
        raw = chat.render_raw(
            context.messages,
            tools=context.tools,
            add_generation_prompt=context.add_generation_prompt,
            continue_final_message=context.continue_final_message,
            **context.template_args,
        )
        assert json.loads(out)["prompt"] == raw, path.name


def test_render_polyfills_rewrite_what_the_template_cannot_show(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "t.jinja", TEMPLATE)
    messages = write(tmp_path, "m.json", [{"role": "user", "content": "Zq7User1"}])
    tools = write(tmp_path, "tools.json", [{"type": "function", "function": {"name": "f"}}])
    assert run("render", template, "--messages", messages, "--tools", tools, "--no-polyfills") == (
        0,
        "[user] Zq7User1\n1 tools\n",
        "",
    )
    code, out, _ = run("render", template, "--messages", messages, "--tools", tools)
    assert (code, out) == (
        0,
        "[system] You can call the following tools. To call one, reply with a JSON object on its own line: "
        '{"name": <tool name>, "arguments": <arguments object>}.\n{"name": "f"}\n[user] Zq7User1\n',
    )


def test_render_reads_a_context_file(run: Run, tmp_path: Path) -> None:
    template = write(tmp_path, "t.jinja", TEMPLATE)
    context = CONTEXTS / "simple.json"
    user_text = json.loads(context.read_text())["messages"][-1]["content"]
    assert run("render", template, "--messages", context, "--engine", "minijinja") == (0, f"[user] {user_text}\n", "")


def test_render_isolated_gives_the_same_prompt_and_a_runaway_template_a_limit_error(run: Run, tmp_path: Path) -> None:
    template = write(tmp_path, "t.jinja", TEMPLATE)
    context = CONTEXTS / "simple.json"
    plain = run("render", template, "--messages", context, "--engine", "minijinja")
    assert run("render", template, "--messages", context, "--engine", "minijinja", "--isolate") == plain
    doubling = "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
    runaway = write(tmp_path, "runaway.jinja", doubling + "{{ ns.s }}")
    code, out, err = run("render", runaway, "--messages", context, "--engine", "minijinja", "--isolate")
    assert (code, out) == (3, "")
    # Fuel ends it in the worker (10 M fuel pays for 640 MB of data), or the worker's memory cap, or, on a loaded
    # machine, its time limit; either way a typed limit error, and the CLI lives on.
    assert err.startswith("chatcaps: error: RenderLimitError: ")
    assert any(text in err for text in ("ran out of fuel", "memory allocation of", "within time_s=")), err


def test_a_context_files_flags_apply(run: Run, tmp_path: Path) -> None:
    template = write(tmp_path, "t.jinja", "{{ messages|length }}{% if add_generation_prompt %}+gen{% endif %}")
    context = write(tmp_path, "c.json", {"messages": [], "add_generation_prompt": False})
    assert run("render", template, "--messages", context) == (0, "0\n", "")
    assert run("render", template, "--messages", write(tmp_path, "m.json", [])) == (0, "0+gen\n", "")
    assert run("render", template, "--messages", write(tmp_path, "m.json", []), "--no-generation-prompt") == (
        0,
        "0\n",
        "",
    )


def test_a_context_files_reasoning_is_the_default_intent(run: Run, tmp_path: Path) -> None:
    template = write(tmp_path, "think.jinja", THINK)
    context = write(tmp_path, "c.json", {"messages": USER, "reasoning": "off"})
    assert run("render", template, "--messages", context) == (0, "<|user|>Hi\n<|assistant|><think></think>\n", "")
    assert run("render", template, "--messages", context, "--reasoning", "default") == (
        0,
        "<|user|>Hi\n<|assistant|>\n",
        "",
    )


# --- zoo ----------------------------------------------------------------------------------------------------------

ZOO_MARKDOWN = (
    "| template | reasoning | markers | history | default state | controls | tools | tool calls | end of turn | roles "
    "| content |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|\n"
    "| plain.jinja | none | - | none | none | - | responses | - | - | system,inline,developer | string |\n"
    "| think.jinja | reasoning_content | <think> … </think> | all | free "
    "| enable_thinking (toggle, default true: false, true) | responses | - | - | system,inline,developer | string |\n"
    "| tools_model/ | none | - | none | none | - | definitions,responses | - | - | system,inline,developer "
    "| string |\n"
)


@pytest.fixture
def zoo_folder(tmp_path: Path) -> Path:
    """Three small templates: two files and a model folder; and a file that is not a template."""
    folder = write_folder(
        tmp_path / "zoo",
        {
            "plain.jinja": PLAIN,
            "think.jinja": THINK,
            "tools_model/tokenizer_config.json": TOOLS_CONFIG,
            "notes.txt": "x",
        },
    )
    return folder


def expected_caps(engine: EngineName = "jinja2") -> dict[str, Any]:
    return {
        "plain.jinja": detect_caps(PLAIN, engine=engine).to_dict(),
        "think.jinja": detect_caps(THINK, engine=engine).to_dict(),
        "tools_model/": detect_caps(str(TOOLS_CONFIG["chat_template"]), bos_token="<s>", engine=engine).to_dict(),
    }


def test_zoo_markdown_is_the_docs_matrix(zoo_folder: Path, run: Run) -> None:
    assert run("zoo", zoo_folder, "--markdown") == (0, ZOO_MARKDOWN, "")


def test_zoo_json_maps_each_template_to_its_caps(zoo_folder: Path, run: Run) -> None:
    code, out, err = run("zoo", zoo_folder, "--json", "--engine", "minijinja")
    assert (code, err) == (0, "")
    assert json.loads(out) == expected_caps("minijinja")
    assert run("zoo", zoo_folder, "--json", "--engine", "minijinja", "--jobs", "2") == (0, out, "")


def test_zoo_progress_bar_only_on_a_terminal(zoo_folder: Path) -> None:
    """stderr a real pseudo-terminal: rich draws its bar there, and stdout carries the same matrix as ever."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "CHATCAPS_CACHE_DIR": ""}
    process = subprocess.Popen(
        [CHATCAPS, "zoo", zoo_folder, "--markdown"], stdout=subprocess.PIPE, stderr=terminal, env=env
    )
    os.close(terminal)
    out, _ = process.communicate(timeout=60)
    drawn = b""
    with contextlib.suppress(OSError):  # reading a pty whose other end closed ends with EIO
        while chunk := os.read(controller, 65536):
            drawn += chunk
    os.close(controller)
    assert (process.returncode, out.decode()) == (0, ZOO_MARKDOWN)
    assert b"detecting caps" in drawn
    assert b"100%" in drawn


def test_zoo_table(zoo_folder: Path, run: Run) -> None:
    code, out, err = run("zoo", zoo_folder)
    assert (code, err) == (0, "")
    assert out.splitlines()[0].rstrip() == f"caps matrix: 3 templates in {zoo_folder} (jinja2)"
    header = [cell.strip() for cell in out.splitlines()[2].split("┃")[1:-1]]
    assert header == [
        "template",
        "reasoning",
        "markers",
        "history",
        "default state",
        "controls",
        "tools",
        "tool calls",
        "end of turn",
        "roles",
        "content",
    ]
    markdown_rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in ZOO_MARKDOWN.splitlines()[2:]]
    assert table_rows(out) == markdown_rows


def test_zoo_lists_broken_templates_and_goes_on(zoo_folder: Path, run: Run) -> None:
    write(zoo_folder, "broken.jinja", "{% if x %}")
    code, out, err = run("zoo", zoo_folder, "--markdown")
    assert (code, err) == (0, "")
    broken = (
        "broken.jinja: TemplateSyntaxError: broken.jinja:1:9: Unexpected end of template. Jinja was looking for the "
        "following tags: 'elif' or 'else' or 'endif'. The innermost block that needs to be closed is 'if'."
    )
    assert out == ZOO_MARKDOWN + f"\nTemplates that failed (1):\n\n- {broken}\n"
    code, out, _ = run("zoo", zoo_folder, "--json")
    assert json.loads(out) == {**expected_caps(), "broken.jinja": {"error": broken.split(": ", 1)[1]}}
    code, out, _ = run("zoo", zoo_folder)
    assert code == 0
    assert ["broken.jinja", broken.split(": ", 1)[1]] in table_rows(out)


def test_zoo_html_writes_the_site_the_same_under_jobs(zoo_folder: Path, tmp_path: Path, run: Run) -> None:
    write(zoo_folder, "broken.jinja", "{% if x %}")
    written = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"site{jobs}"
        assert run("zoo", zoo_folder, "--html", out, "--jobs", jobs) == (
            0,
            f"wrote {out / 'index.html'} and 6 more files (template pages: 3)\n",
            "",
        )
        written[jobs] = {str(path.relative_to(out)): path.read_text("utf-8") for path in out.rglob("*.*")}
    assert written["1"] == written["2"]
    assert sorted(written["1"]) == [
        "base.css",
        "index.html",
        "site.css",
        "site.js",
        "t/plain.jinja.html",
        "t/think.jinja.html",
        f"t/tools_model_-{hashlib.sha256(b'tools_model/').hexdigest()[:10]}.html",
    ]
    assert "<h1>chatcaps zoo: 3 templates in zoo</h1>" in written["1"]["index.html"]
    assert "<li><code>broken.jinja</code>: " in written["1"]["index.html"]


def test_zoo_html_over_an_earlier_site_drops_the_pages_of_templates_gone(
    zoo_folder: Path, tmp_path: Path, run: Run
) -> None:
    out = tmp_path / "site"
    assert run("zoo", zoo_folder, "--html", out)[0] == 0
    (zoo_folder / "plain.jinja").unlink()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert run("zoo", zoo_folder, "--html", out)[0] == 0
    assert not (out / "t" / "plain.jinja.html").exists()
    assert (out / "t" / "think.jinja.html").exists() and (out / "notes.txt").read_text("utf-8") == "mine"


def test_zoo_reads_a_manifest_and_defaults_to_the_configured_zoo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    zoo = write_folder(tmp_path / "zoo", {"templates/org__model.jinja": SOURCE_TEMPLATE})
    digest = hashlib.sha256(SOURCE_TEMPLATE.encode()).hexdigest()
    row = ["org__model.jinja", "org/model", "org/repo", "t.jinja", "abc", digest, "<s>", "</s>", ""]
    write(zoo, "MANIFEST.tsv", "\t".join(MANIFEST_COLUMNS) + "\n" + "\t".join(row) + "\n")
    monkeypatch.setenv("CHATCAPS_ZOO", str(zoo))
    expected = {"org__model.jinja": detect_caps(SOURCE_TEMPLATE, bos_token="<s>", eos_token="</s>").to_dict()}
    code, out, _ = run("zoo", "--json")
    assert (code, json.loads(out)) == (0, expected)


def test_zoo_on_a_folder_without_templates_exits_3(tmp_path: Path, run: Run) -> None:
    assert run("zoo", tmp_path) == (
        3,
        "",
        f"chatcaps: error: SourceError: {tmp_path}: no *.jinja or *.gguf templates and no model folders in it\n",
    )


# --- diff ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def tool_context(tmp_path: Path) -> Path:
    """A folder holding one context: a tool call and its result."""
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "name": "f", "content": "ok"},
    ]
    write(tmp_path / "contexts", "tool_turn.json", {"messages": messages, "add_generation_prompt": False})
    return tmp_path / "contexts"


def test_diff_agreeing_engines_exit_0(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "agree.jinja", AGREE)
    count = len(load_contexts())
    assert run("diff", template) == (
        0,
        f"{template}: jinja2 vs minijinja on {count} contexts\nraw: {count} agree\npolyfills: {count} agree\n",
        "",
    )


def test_diff_prints_a_unified_diff_and_exits_1(tmp_path: Path, tool_context: Path, run: Run) -> None:
    template = write(tmp_path, "markup.jinja", MARKUP)
    assert run("diff", template, "--contexts", tool_context, "--mode", "raw") == (
        1,
        f"{template}: jinja2 vs minijinja on 1 contexts\n"
        "raw: 0 agree, 1 differ: tool_turn\n"
        "\n"
        "--- jinja2 (raw, tool_turn)\n"
        "+++ minijinja (raw, tool_turn)\n"
        "@@ -1,3 +1,3 @@\n"
        " user\n"
        " assistant\n"
        "-tool &lt;r&gt;\n"
        "+tool <r>\n",
        "",
    )


def test_diff_where_one_engine_raises_and_polyfills_make_them_agree(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "none_tools.jinja", NONE_TOOLS)
    code, out, err = run("diff", template, "--json")
    assert (code, err) == (1, "")
    data = json.loads(out)
    assert (data["source"], data["engines"], data["agree"]) == (str(template), ["jinja2", "minijinja"], False)
    cases = {(case["mode"], case["context"]): case for case in data["cases"]}
    assert len(cases) == 2 * len(load_contexts())
    simple = cases["raw", "simple"]
    assert list(simple) == ["agree", "context", "diff", "jinja2", "minijinja", "mode"]
    assert simple["jinja2"] == {
        "output": None,
        "error_type": "TemplateRenderError",
        "error": "TypeError: 'NoneType' object is not iterable",
    }
    assert simple["minijinja"] == {"output": "user\n", "error_type": None, "error": None}
    assert simple["diff"] == (
        "raw, simple: jinja2 raised TemplateRenderError: TypeError: 'NoneType' object is not iterable; "
        "minijinja rendered 5 characters\n"
    )
    assert all(case["agree"] for (mode, _), case in cases.items() if mode == "polyfills")


# --- usage, errors, exit codes ------------------------------------------------------------------------------------


def test_template_errors_exit_3_with_one_line_and_the_place_under_it(tmp_path: Path, run: Run) -> None:
    """The message on one line (a multi-line one joined), the line it started on under it."""
    template = write(tmp_path, "t.jinja", "{{ raise_exception('no system\nrole') }}")
    messages = write(tmp_path, "m.json", [])
    assert run("render", template, "--messages", messages, "--no-polyfills") == (
        3,
        "",
        "chatcaps: error: TemplateRenderError: no system role\n"
        "  1 | {{ raise_exception('no system\n"
        "    |    ^^^^^^^^^^^^^^^^^^^^^^^^^^\n",
    )


BROKEN = "{% for m in messages %}\n  {{ m.content | upper( }}\n{% endfor %}\n"
RAISES = (
    "{% for m in messages %}\n"
    "{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ m.content }}\n"
    "{% endfor %}\n"
)
BROKEN_SAID = (
    "chatcaps: error: TemplateSyntaxError: {template}:2:25: unexpected '}}', expected ')'\n"
    "  2 |   {{{{ m.content | upper( }}}}\n"
    "    |                         ^\n"
)


@pytest.mark.parametrize("command", [["detect"], ["render", "--messages", "m.json"], ["diff"]])
def test_a_template_that_does_not_parse_is_pointed_at(tmp_path: Path, run: Run, command: list[str]) -> None:
    """jinja2's message and line, and the span of the token minijinja refuses on that line."""
    template = write(tmp_path, "broken.jinja", BROKEN)
    write(tmp_path, "m.json", USER)
    argv = [arg if arg != "m.json" else tmp_path / arg for arg in command]
    assert run(argv[0], template, *argv[1:]) == (3, "", BROKEN_SAID.format(template=template))


@pytest.mark.parametrize("engine", ["jinja2", "minijinja"])
def test_a_template_that_raises_is_pointed_at(tmp_path: Path, run: Run, engine: str) -> None:
    """The `raise_exception` call with that literal message, on both engines."""
    template = write(tmp_path, "raises.jinja", RAISES)
    messages = write(tmp_path, "m.json", [{"role": "system", "content": "Be brief."}, *USER])
    call = "raise_exception('System role not supported')"
    assert run("render", template, "--messages", messages, "--engine", engine, "--no-polyfills") == (
        3,
        "",
        "chatcaps: error: TemplateRenderError: System role not supported\n"
        f"  2 | {{% if m.role == 'system' %}}{{{{ {call} }}}}{{% endif %}}{{{{ m.content }}}}\n"
        f"    | {' ' * 30}{'^' * len(call)}\n",
    )


def test_an_undefined_call_is_pointed_at_with_minijinjas_span_and_jinja2s_line(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "t.jinja", "{% for m in messages %}\n{{ m.content }}{{ shout(m) }}\n{% endfor %}")
    messages = write(tmp_path, "m.json", USER)
    said = {
        engine: run("render", template, "--messages", messages, "--engine", engine, "--no-polyfills")
        for engine in ("jinja2", "minijinja")
    }
    assert said == {
        "jinja2": (
            3,
            "",
            "chatcaps: error: TemplateRenderError: 'shout' is undefined\n  2 | {{ m.content }}{{ shout(m) }}\n",
        ),
        "minijinja": (
            3,
            "",
            "chatcaps: error: TemplateRenderError: UnknownFunction: shout is unknown\n"
            "  2 | {{ m.content }}{{ shout(m) }}\n"
            "    |                   ^^^^^^^^\n",
        ),
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["render"], "chatcaps render: error: the following arguments are required: --messages"),
        (
            ["render", "--messages", "m.json"],
            "chatcaps render: error: one of the arguments SOURCE --encoder is required",
        ),
        (
            ["render", "t.jinja", "--messages", "m.json", "--reasoning", "lots"],
            "chatcaps render: error: argument --reasoning: 'lots': use off, on, low, medium, high, default or a "
            "token budget",
        ),
        (
            ["render", "t.jinja", "--messages", "m.json", "--reasoning", "low", "--no-polyfills"],
            "chatcaps render: error: argument --no-polyfills: not allowed with argument --reasoning",
        ),
        (["zoo", "--json", "--markdown"], "chatcaps zoo: error: argument --markdown: not allowed with argument --json"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv: list[str], message: str, run: Run) -> None:
    code, out, err = run(*argv)
    assert (code, out) == (2, "")
    assert err == f"{message} (see {message.split(': error')[0]} --help)\n"


def test_unknown_command_exits_2_with_one_line(run: Run) -> None:
    code, out, err = run("frobnicate")
    assert (code, out) == (2, "")
    assert err.startswith("chatcaps: error: argument COMMAND: invalid choice: 'frobnicate' (choose from ")
    assert err.endswith(" (see chatcaps --help)\n")
    assert err.count("\n") == 1


def test_input_errors_exit_3(tmp_path: Path, run: Run) -> None:
    template = write(tmp_path, "t.jinja", PLAIN)
    bad = write(tmp_path, "bad.json", "{not json")
    assert run("render", tmp_path / "nope.jinja", "--messages", bad) == (
        3,
        "",
        f"chatcaps: error: InputError: {tmp_path / 'nope.jinja'}: no such file or folder, and not a Hub repo id "
        "(org/name) or an http(s):// server URL\n",
    )
    code, out, err = run("render", template, "--messages", bad)
    assert (code, out) == (3, "")
    assert err.startswith(f"chatcaps: error: InputError: --messages file {bad}: not valid JSON: ")
    assert run("render", template, "--messages", write(tmp_path, "m.json", [{"role": "robot"}])) == (
        3,
        "",
        "chatcaps: error: InputError: messages[0].role: unknown role 'robot'; "
        "expected one of ['assistant', 'developer', 'system', 'tool', 'user']\n",
    )
    assert run("render", template, "--messages", bad, "--name", "x") == (
        3,
        "",
        f"chatcaps: error: InputError: {template}: a template file holds one template; --name picks among a source's "
        "several\n",
    )
    assert run("detect", template, "--revision", "v1") == (
        3,
        "",
        f"chatcaps: error: InputError: {template}: --revision applies to Hub repo ids only\n",
    )
    assert run("render", template, "--messages", write(tmp_path, "m.json", USER), "--arg", "enable_thinking") == (
        3,
        "",
        "chatcaps: error: InputError: --arg 'enable_thinking': expected KEY=VALUE\n",
    )
    assert run("diff", template, "--contexts", tmp_path / "none") == (
        3,
        "",
        f"chatcaps: error: InputError: --contexts {tmp_path / 'none'}: no *.json contexts in it\n",
    )


def test_version_and_cheap_import(run: Run) -> None:
    assert run("--version") == (0, "chatcaps 0.1.0\n", "")
    code = "import sys, chatcaps.cli; print('rich' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "False\n"


def test_ctrl_c_exits_130_with_one_line(tmp_path: Path) -> None:
    """SIGINT while the command waits on its input (a FIFO: opening its write end returns once chatcaps reads it)."""
    template = write(tmp_path, "t.jinja", PLAIN)
    fifo = tmp_path / "messages.json"
    os.mkfifo(fifo)
    env = {**os.environ, "CHATCAPS_CACHE_DIR": ""}
    process = subprocess.Popen(
        [CHATCAPS, "render", template, "--messages", fifo], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    with fifo.open("w"):
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert (process.returncode, out, err) == (130, b"", b"chatcaps: interrupted\n")


def test_detect_response_template(tmp_path: Path, run: Run) -> None:
    """`--response-template`: the grammar `tokenizer.response_template` takes, as JSON."""
    from chatcaps.reply import response_template

    code, out, err = run("detect", write(tmp_path, "think.jinja", THINK), "--response-template")
    assert (code, err) == (0, "")
    assert json.loads(out) == response_template(detect_caps(THINK))
    assert json.loads(out)["fields"]["reasoning_content"]["close"] == "</think>"


def test_playground_refuses_a_missing_folder_and_a_broken_template_before_listening(tmp_path: Path, run: Run) -> None:
    assert run("playground", "--playground-dir", tmp_path / "none") == (
        3,
        "",
        f"chatcaps: error: InputError: --playground-dir {tmp_path / 'none'}: no such folder\n",
    )
    code, out, err = run("playground", write(tmp_path, "broken.jinja", "{{ m.content }"))
    assert (code, out, err.splitlines()[0]) == (
        3,
        "",
        f"chatcaps: error: TemplateSyntaxError: {tmp_path / 'broken.jinja'}:1:14: unexpected '}}'",
    )
