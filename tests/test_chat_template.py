"""ChatTemplate: sources in, transformers' own rendering out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatcaps import ChatTemplate, Limits, RenderLimitError, TemplateSyntaxError
from chatcaps.detect import _detect
from chatcaps.engines import EngineName, compile_template

CHATML = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_render_raw_passes_the_sources_special_tokens(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML, "bos_token": "<s>", "eos_token": "</s>"})
    )
    template = ChatTemplate.from_dir(tmp_path)
    prompt = template.render_raw([{"role": "user", "content": "Zq7User1"}])
    assert prompt == "<s><|im_start|>user\nZq7User1<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("engine", ["jinja2", "minijinja"])
def test_engines_give_the_same_prompt(engine: EngineName) -> None:
    template = ChatTemplate.from_str(CHATML, bos_token="<s>", engine=engine)
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert template.render_raw(messages, add_generation_prompt=False) == (
        "<s><|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n"
    )


def test_continue_final_message_stops_inside_the_last_turn() -> None:
    template = ChatTemplate.from_str(CHATML)
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "Once upon"}]
    prompt = template.render_raw(messages, add_generation_prompt=False, continue_final_message=True)
    assert prompt == "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nOnce upon"


BLOCKS = (
    "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for b in m.content %}{{ b.text }}{% endfor %}{% endif %}{% endfor %}"
)


@pytest.mark.parametrize("content", ["Once upon", [{"type": "text", "text": "Once"}, {"type": "text", "text": "upon"}]])
def test_continue_final_message_leaves_the_result_messages_untagged(content: object) -> None:
    """The continue tag goes into a copy of the final message: neither the caller's nor the result's carries it."""
    template = ChatTemplate.from_str(BLOCKS)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "a"}, {"role": "assistant", "content": content}]
    result = template.render(messages, add_generation_prompt=False, continue_final_message=True)
    continued = "Once upon" if isinstance(content, str) else "Onceupon"
    assert result.prompt == "<user>a<assistant>" + continued
    assert result.messages[-1]["content"] == content
    assert messages[-1]["content"] == content


def test_template_args_override_special_tokens() -> None:
    template = ChatTemplate.from_str("{{ bos_token }}|{{ flag }}", bos_token="<s>")
    assert template.render_raw([], bos_token="<B>", flag=True) == "<B>|True"


def test_limits_are_per_template() -> None:
    template = ChatTemplate.from_str("{% for i in range(100) %}x{% endfor %}", limits=Limits(max_output_chars=10))
    with pytest.raises(RenderLimitError):
        template.render_raw([])


def test_syntax_error_at_construction_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.jinja"
    path.write_text("ok\n{% for %}")
    with pytest.raises(TemplateSyntaxError) as raised:
        ChatTemplate.from_file(path)
    assert (raised.value.template_name, raised.value.line) == (str(path), 2)


def test_the_library_prints_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "chat_template.jinja").write_text(CHATML)
    for engine in ("jinja2", "minijinja"):
        template = ChatTemplate.from_dir(tmp_path, engine=engine)
        template.render_raw([{"role": "user", "content": "a"}])
        with pytest.raises(TemplateSyntaxError):
            ChatTemplate.from_str("{% if %}", engine=engine)
    assert capfd.readouterr() == ("", "")


def test_a_jinja2_template_keeps_no_parse_tree_once_it_has_caps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jinja2 renderer holds its parse tree for detection to read the source; once Caps are known it is dropped,
    whether detection ran or the Caps came from the disk cache (where nothing ever takes it)."""
    monkeypatch.setenv("CHATCAPS_CACHE_DIR", str(tmp_path))
    source = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    probed = ChatTemplate.from_str(source, name="probed.jinja")
    assert probed.caps.template_sha256 == probed.source.sha256
    assert probed.renderer.source_tree() is None
    _detect.cache_clear()
    compile_template.cache_clear()
    cached = ChatTemplate.from_str(source, name="cached.jinja")
    assert cached.renderer is not probed.renderer
    assert cached.caps == probed.caps
    assert cached.renderer.source_tree() is None
