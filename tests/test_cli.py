"""The `chatcaps` command: prompts on stdout, one-line errors on stderr, exit codes 0 / 2 / 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatcaps.cli import main

TEMPLATE = (
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    "{% if tools %}{{ tools|length }} tools\n{% endif %}"
)


def write(tmp_path: Path, name: str, content: object) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_render_prints_the_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = write(tmp_path, "t.jinja", TEMPLATE)
    messages = write(tmp_path, "m.json", [{"role": "user", "content": "Zq7User1"}])
    tools = write(tmp_path, "tools.json", [{"type": "function", "function": {"name": "f"}}])
    assert main(["render", template, "--messages", messages, "--tools", tools]) == 0
    assert capsys.readouterr().out == "[user] Zq7User1\n1 tools\n"


def test_render_reads_a_context_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    template = write(tmp_path, "t.jinja", TEMPLATE)
    context = Path(__file__).parents[1] / "contexts" / "simple.json"
    assert main(["render", template, "--messages", str(context), "--engine", "minijinja"]) == 0
    user_text = json.loads(context.read_text())["messages"][-1]["content"]
    assert capsys.readouterr().out == f"[user] {user_text}\n"


def test_a_context_files_flags_apply(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    template = write(tmp_path, "t.jinja", "{{ messages|length }}{% if add_generation_prompt %}+gen{% endif %}")
    context = write(tmp_path, "c.json", {"messages": [], "add_generation_prompt": False})
    assert main(["render", template, "--messages", context]) == 0
    assert main(["render", template, "--messages", write(tmp_path, "m.json", [])]) == 0
    assert capsys.readouterr().out == "0\n0+gen\n"


def test_template_errors_exit_3_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = write(tmp_path, "t.jinja", "{{ raise_exception('no system role') }}")
    messages = write(tmp_path, "m.json", [])
    assert main(["render", template, "--messages", messages]) == 3
    assert capsys.readouterr().err == "chatcaps: TemplateRenderError: no system role\n"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["render"])
    assert raised.value.code == 2
