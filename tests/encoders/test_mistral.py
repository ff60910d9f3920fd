"""Mistral's encoder against mistral-common, for every tokenizer file its wheel ships: chatcaps' render equals
`encode_chat_completion` token for token over the repository's test contexts (raw, and through the polyfills), and its
text equals mistral-common's own generated Jinja template's render wherever both render. The contexts mistral-common
refuses, and where its Jinja template parts from it, are data (tests/data/encoders/mistral_contexts.json).
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from paths import DATA, DOCS, ROOT

from chatcaps import ChatTemplate, sources
from chatcaps.cli import main
from chatcaps.contexts import load_contexts
from chatcaps.encoders import EncoderRenderer, encoder, mistral, names
from chatcaps.errors import ChatcapsError, InputError

pytest.importorskip("mistral_common", reason="mistral-common is not installed (chatcaps[mistral])")

from mistral_common.integrations.chat_templates.chat_templates import convert_tokenizer_to_chat_template
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.validator import ValidationMode
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

EXPECTED = json.loads((DATA / "encoders" / "mistral_contexts.json").read_text("utf-8"))
FILES = {path: version for version, path in sorted(mistral.shipped().items(), reverse=True)}
"""Each shipped file once, by its version name ("tekken" for the newest Tekken file)."""
VERSIONS = {version: path for path, version in sorted(FILES.items())}
CONTEXTS = {context.name: context for context in load_contexts()}
ASKED: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@cache
def _reference(version: str) -> Any:
    return MistralTokenizer.from_file(VERSIONS[version], mode=ValidationMode.agnostic)


@cache
def _template(version: str) -> ChatTemplate:
    return ChatTemplate.from_mistral(VERSIONS[version])


def _renderer(version: str) -> EncoderRenderer:
    renderer = _template(version).renderer
    assert isinstance(renderer, EncoderRenderer)
    return renderer


def _encoded(version: str, messages: Any, tools: Any, continued: bool = False) -> tuple[int, ...] | None:
    """mistral-common's tokens for an OpenAI request; None where it refuses."""
    try:
        given = None if tools is None else list(tools)
        request = ChatCompletionRequest.from_openai(list(messages), given, continue_final_message=continued)
        return tuple(_reference(version).encode_chat_completion(request).tokens)
    except Exception:  # its refusals: the data says which and why
        return None


def _text(version: str, tokens: tuple[int, ...]) -> str:
    return mistral.Tokenizer.text(_tokenizer(version), tokens)


@cache
def _tokenizer(version: str) -> mistral.Tokenizer:
    path = VERSIONS[version]
    return mistral.load(path, mistral.file_digest(path))


def _kwargs(context: Any) -> dict[str, Any]:
    return {
        "tools": context.tools,
        "add_generation_prompt": context.add_generation_prompt,
        "continue_final_message": context.continue_final_message,
        **context.template_args,
    }


CASES = [(version, name) for version in VERSIONS for name in CONTEXTS]


def test_every_shipped_tokenizer_is_tested() -> None:
    assert sorted(VERSIONS) == ["tekken", "tekken_240718", "v1", "v2", "v3", "v7", "v7m1"]
    assert [VERSIONS[version].name for version in sorted(VERSIONS)] == [
        "tekken_240911.json",
        "tekken_240718.json",
        "tokenizer.model.v1",
        "mistral_instruct_tokenizer_240216.model.v2",
        "mistral_instruct_tokenizer_240323.model.v3",
        "mistral_instruct_tokenizer_241114.model.v7",
        "mistral_instruct_tokenizer_241114.model.v7m1",
    ]
    assert sorted(EXPECTED["reference_refuses"]) == sorted(VERSIONS)


@pytest.mark.parametrize(("version", "name"), CASES, ids=[f"{version}-{name}" for version, name in CASES])
def test_the_render_is_encode_chat_completion(version: str, name: str) -> None:
    """Raw (`render_raw`, what the template gets): the same tokens and their text, or both refuse (the data)."""
    context = CONTEXTS[name]
    reference = _encoded(version, list(context.messages), context.tools, context.continue_final_message)
    assert (reference is None) == (name in EXPECTED["reference_refuses"][version])
    variables = {"messages": list(context.messages), "tools": context.tools}
    if reference is None or name in EXPECTED["chatcaps_refuses"]:
        with pytest.raises(InputError):
            _template(version).render_raw(context.messages, **_kwargs(context))
        return
    assert _template(version).render_raw(context.messages, **_kwargs(context)) == _text(version, reference)
    if not context.continue_final_message:  # a continued message's tokens are the prefix's, cut where it ends
        assert _renderer(version).tokens(variables) == reference


@pytest.mark.parametrize(("version", "name"), CASES, ids=[f"{version}-{name}" for version, name in CASES])
def test_the_polyfilled_render_is_encode_chat_completion_of_what_the_template_got(version: str, name: str) -> None:
    """Through the polyfills (call ids shortened, reasoning and what the version cannot write adapted): the prompt is
    mistral-common's encoding of the messages and tools the template got, or both refuse."""
    context = CONTEXTS[name]
    try:
        result = _template(version).render(
            context.messages,
            tools=context.tools,
            reasoning=context.reasoning,  # type: ignore[arg-type]  # the contexts hold valid intents
            template_args=context.template_args,
            add_generation_prompt=context.add_generation_prompt,
            continue_final_message=context.continue_final_message,
        )
    except ChatcapsError:
        assert name in {"image_block", "image_url_openai"}  # an image by URL: mistral-common would download it
        return
    given = result.template_kwargs["tools"]
    reference = _encoded(version, list(result.messages), given, context.continue_final_message)
    assert reference is not None
    assert result.prompt == _text(version, reference)


@pytest.mark.parametrize(("version", "name"), CASES, ids=[f"{version}-{name}" for version, name in CASES])
def test_mistral_commons_generated_jinja_template_writes_the_same_text(version: str, name: str) -> None:
    """Where both render, the same string; where they part, exactly as the data says."""
    context = CONTEXTS[name]
    jinja = _generated(version)
    reference = _encoded(version, list(context.messages), context.tools, context.continue_final_message)
    try:
        rendered: str | None = jinja.render_raw(context.messages, **_kwargs(context))
    except ChatcapsError:
        rendered = None
    expected = EXPECTED["generated_jinja"].get(version, {}).get(name)
    if reference is None or rendered is None:
        parted = None if (reference is None) == (rendered is None) else "the template refuses"
        assert (parted if rendered is None else "the template renders") == expected
        return
    text = _text(version, reference)
    if expected is None:
        assert rendered == text
    else:
        assert rendered != text
        assert f"differs at {_parted_at(rendered, text)}" == expected


def _parted_at(one: str, other: str) -> int:
    return next((at for at, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), min(len(one), len(other)))


@cache
def _generated(version: str) -> ChatTemplate:
    source = sources.from_str(convert_tokenizer_to_chat_template(VERSIONS[version]), name=f"generated {version}")
    return ChatTemplate(source, bos_token="<s>", eos_token="</s>")


def test_call_ids_are_rewritten_to_nine_characters_and_the_report_says_so() -> None:
    messages = [
        *ASKED,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {}}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    result = _template("tekken").render(messages, tools=TOOLS)
    assert [applied.detail for applied in result.applied] == [
        "messages[1]: call ids shortened to 9 alphanumerics",
        "messages[2]: tool_call_id shortened to 9 alphanumerics",
    ]
    assert result.messages[1]["tool_calls"][0]["id"] == result.messages[2]["tool_call_id"] == "l6fBekwlx"
    assert result.prompt.endswith(
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {}, "id": "l6fBekwlx"}]</s>'
        '[TOOL_RESULTS]{"content": "sunny", "call_id": "l6fBekwlx"}[/TOOL_RESULTS]'
    )


def test_mistral_commons_refusals_name_the_message_and_field() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {}}}
    messages = [
        *ASKED,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "x", "content": ""},
    ]
    with pytest.raises(InputError) as raised:
        _template("v3").render_raw(messages, tools=TOOLS)
    assert str(raised.value) == (
        "messages[1].tool_calls: InvalidFunctionCallException: Tool call id was call_1 but must be a-z, A-Z, 0-9, "
        "with a length of 9."
    )
    with pytest.raises(InputError) as raised:
        _template("v3").render_raw([{"role": "robot", "content": "x"}])
    assert str(raised.value) == (
        "messages[0].role: unknown role 'robot': mistral-common reads system, developer, user, assistant, tool"
    )
    short = {**call, "id": "abcDEF123"}
    answered = [
        *ASKED,
        {"role": "assistant", "tool_calls": [short]},
        {"role": "tool", "tool_call_id": "abcDEF123", "content": ""},
    ]
    with pytest.raises(InputError) as raised:  # no message is at fault: the version has no tools
        _template("v1").render_raw(answered, tools=TOOLS)
    assert (str(raised.value), raised.value.index, raised.value.field) == (
        "TokenizerException: Tools not implemented for tokenizer V1",
        None,
        "tools",
    )
    with pytest.raises(InputError) as raised:
        _template("v3").render_raw(ASKED, reasoning_effort="high")
    assert (str(raised.value), raised.value.field) == (
        "InvalidRequestException: reasoning_effort='high' is not supported for this model",
        "reasoning_effort",
    )


def test_an_image_by_url_is_refused() -> None:
    url = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    with pytest.raises(InputError) as raised:
        _template("tekken").render_raw([{"role": "user", "content": [url]}])
    assert str(raised.value) == (
        "messages[0].content: an image by URL (https://example.com/cat.png): mistral-common would download it; give"
        " it as a data: URL"
    )


def test_an_inline_image_is_mistral_commons() -> None:
    pytest.importorskip("cv2", reason="mistral-common encodes images with opencv (mistral-common[image])")
    inline = {"type": "image_url", "image_url": {"url": _png()}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, inline]}]
    reference = _encoded("tekken", messages, None)
    assert reference is not None
    prompt = _template("tekken").render_raw(messages)
    assert prompt == _text("tekken", reference) == "<s>[INST][IMG][IMG_END]What is it?[/INST]"  # one 16x16 patch


def _png() -> str:
    """A 16x16 white PNG as a data: URL (pillow comes with mistral-common)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), "white").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize("version", sorted(set(VERSIONS) - {"v1"}))
def test_a_reply_is_read_in_the_versions_own_call_form(version: str) -> None:
    """The reply side reads what the version writes for a call: its render of the assistant turn, after the prompt."""
    call = {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    template = _template(version)
    prompt = template.render_raw(ASKED, tools=TOOLS)
    whole = template.render_raw([*ASKED, {"role": "assistant", "tool_calls": [call]}], tools=TOOLS)
    assert whole.startswith(prompt)
    reply = template.render(ASKED, tools=TOOLS).parse_reply(whole[len(prompt) :])
    assert [(found["function"]["name"], json.loads(found["function"]["arguments"])) for found in reply.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert reply.content is None or reply.content == ""


def test_the_call_formats_each_version_writes() -> None:
    formats = {
        version: (found.begin, found.call, found.separator, found.end)
        for version in sorted(VERSIONS)
        if (found := _template(version).caps.tools.call_format) is not None
    }
    with_ids = '{"name": "${name}", "arguments": ${arguments}, "id": "${id}"}'
    assert formats == {
        "tekken": ("[TOOL_CALLS][", with_ids, ", ", "]"),
        "tekken_240718": ("[TOOL_CALLS][", with_ids, ", ", "]"),
        "v2": ("[TOOL_CALLS] [", '{"name": "${name}", "arguments": ${arguments}}', ", ", "]"),
        "v3": ("[TOOL_CALLS] [", with_ids, ", ", "]"),
        "v7": ("[TOOL_CALLS] [", with_ids, ", ", "]"),
        "v7m1": ("[TOOL_CALLS] [", with_ids, ", ", "]"),
    }


def test_no_shipped_version_declares_a_control() -> None:
    """The shipped tokenizers (v1 to v7) have neither [THINK] nor reasoning_effort: nothing to declare."""
    for version in VERSIONS:
        caps = _template(version).caps
        assert (caps.reasoning.controls, caps.reasoning.format, caps.engine) == ((), "none", "encoder")


def test_version_names_and_the_encoder_names() -> None:
    assert [name for name in names() if name.startswith("mistral-")] == [
        "mistral-tekken",
        "mistral-tekken_240718",
        "mistral-tekken_240911",
        "mistral-v1",
        "mistral-v2",
        "mistral-v3",
        "mistral-v7",
        "mistral-v7m1",
    ]
    found = encoder("mistral-v3")
    assert (found.name, found.bos_token, found.eos_token, found.folder_file) == (
        "mistral-v3",
        "<s>",
        "</s>",
        "mistral_instruct_tokenizer_240323.model.v3",
    )
    assert ChatTemplate.from_mistral("v3").render_raw(ASKED) == "<s>[INST] Weather in Paris?[/INST]"


@pytest.mark.parametrize(("version", "file"), [("tekken", "tekken.json"), ("v3", "tokenizer.model.v3")])
def test_a_model_folder_with_a_mistral_tokenizer_uses_it(version: str, file: str, tmp_path: Path) -> None:
    (tmp_path / file).symlink_to(VERSIONS[version])
    (tmp_path / "chat_template.jinja").write_text("{{ 'the folder also ships a Jinja template' }}")
    template = ChatTemplate.from_dir(tmp_path)
    assert (template.engine, template.source.name) == ("encoder", str(tmp_path / file))
    assert template.render_raw(ASKED) == _template(version).render_raw(ASKED)
    assert ChatTemplate.from_dir(tmp_path, name="default").engine == "jinja2"


def test_the_cli_reads_a_tokenizer_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tekken = tmp_path / "tekken.json"
    shutil.copyfile(VERSIONS["tekken"], tekken)
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(ASKED))
    assert main(["render", str(tekken), "--messages", str(messages)]) == 0
    assert capsys.readouterr().out == "<s>[INST]Weather in Paris?[/INST]\n"
    assert main(["render", "--encoder", "mistral-v7", "--messages", str(messages)]) == 0
    assert capsys.readouterr().out == "<s>[INST] Weather in Paris?[/INST]\n"
    assert main(["detect", str(tekken), "--json"]) == 0
    caps = json.loads(capsys.readouterr().out)
    assert (caps["engine"], caps["tools"]["call_format"]["begin"], caps["end_of_turn"]) == (
        "encoder",
        "[TOOL_CALLS][",
        "</s>",
    )


def test_without_mistral_common_a_tokenizer_file_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "mistral_common.tokens.tokenizers.mistral", None)
    file = tmp_path / "tekken.json"
    file.write_text("{}")
    with pytest.raises(ChatcapsError, match=r"needs mistral-common: pip install 'chatcaps\[mistral\]'$"):
        sources.from_mistral(file)


def test_serve_takes_a_tokenizer_file_as_its_template(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`chatcaps serve --template` reads its SOURCE as detect and render do: a Mistral tokenizer file is its encoder."""
    pytest.importorskip("starlette", reason="chatcaps serve needs the serve extra")
    import chatcaps.serve
    from chatcaps.serve.upstream import UpstreamBackend, Waiting

    served: list[Any] = []
    monkeypatch.setattr(chatcaps.serve, "run", lambda backend, **options: served.append(backend))
    monkeypatch.delenv("CHATCAPS_API_KEY", raising=False)
    tekken = tmp_path / "tekken.json"
    tekken.symlink_to(VERSIONS["tekken"])
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--template", str(tekken)]) == 0
    (backend,) = served
    assert isinstance(backend, UpstreamBackend) and isinstance(backend.client, Waiting)
    template = backend.client.template
    assert (template.engine, template.source.name, template.render_raw(ASKED)) == (
        "encoder",
        str(tekken),
        "<s>[INST]Weather in Paris?[/INST]",
    )


def test_docs_hold_the_current_side_by_side_tables(zoo: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/encoders.md's Mistral tables are what scripts/encoders_table.py --family mistral prints now."""
    spec = importlib.util.spec_from_file_location("encoders_table", ROOT / "scripts" / "encoders_table.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.mistral_tables()
    assert capsys.readouterr().out.strip() in (DOCS / "encoders.md").read_text("utf-8")


def _tekken(tmp_path: Path, version: str, **extra: Any) -> Path:
    """A Tekken tokenizer of a later `version`: the shipped Tekken 240718 vocabulary with every control token
    mistral-common knows (as its own tests build one), and `extra` settings; mistral-common ships none of v11 on."""
    from mistral_common.tokens.tokenizers.base import SpecialTokens

    data = json.loads(VERSIONS["tekken_240718"].read_text("utf-8"))
    data["config"]["version"] = version
    data["special_tokens"] = [
        {"rank": rank, "token_str": token.value, "is_control": True} for rank, token in enumerate(SpecialTokens)
    ]
    file = tmp_path / "tekken.json"
    file.write_text(json.dumps({**data, **extra}), encoding="utf-8")
    return file


def test_a_tokenizer_with_think_tokens_writes_reasoning_and_reads_it_back(tmp_path: Path) -> None:
    template = ChatTemplate.from_mistral(_tekken(tmp_path, "v13"))
    messages = [*ASKED, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."}, *ASKED]
    prompt = template.render_raw(messages)
    assert prompt == (
        "<s>[INST]Weather in Paris?[/INST][THINK]Look it up.[/THINK]Sunny.</s>[INST]Weather in Paris?[/INST]"
    )
    renderer = template.renderer
    assert isinstance(renderer, EncoderRenderer)
    assert renderer.tokens({"messages": messages}) == _encoded_with(template, messages)
    caps = template.caps
    assert (caps.reasoning.format, caps.reasoning.start_marker, caps.reasoning.end_marker, caps.reasoning.controls) == (
        "reasoning_content",
        "[THINK]",
        "[/THINK]",
        (),
    )
    assert caps.tools.call_format is not None
    assert (caps.tools.call_format.begin, caps.tools.call_format.call) == ("", "[TOOL_CALLS]${name}[ARGS]${arguments}")
    reply = template.render(ASKED, tools=TOOLS).parse_reply(
        '[THINK]Look it up.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}</s>'
    )
    assert (reply.reasoning_content, [call["function"] for call in reply.tool_calls]) == (
        "Look it up.",
        [{"name": "get_weather", "arguments": '{"city": "Paris"}'}],
    )


def _encoded_with(template: ChatTemplate, messages: list[dict[str, Any]]) -> tuple[int, ...]:
    """mistral-common's tokens for `messages` with the template's own tokenizer file."""
    reference = MistralTokenizer.from_file(template.source.name, mode=ValidationMode.agnostic)
    return tuple(reference.encode_chat_completion(ChatCompletionRequest.from_openai(messages)).tokens)


def test_reasoning_effort_is_the_declared_control_where_the_tokenizer_sets_it(tmp_path: Path) -> None:
    effort = {"type": "enum", "values": ["none", "high"], "default": "none", "accepts_none": True}
    template = ChatTemplate.from_mistral(_tekken(tmp_path, "v15", model_settings_builder={"reasoning_effort": effort}))
    [control] = template.caps.reasoning.controls
    assert (control.name, control.role, control.values, control.default, control.declared) == (
        "reasoning_effort",
        "effort",
        ("none", "high"),
        "none",
        True,
    )
    result = template.render(ASKED, reasoning="high")
    assert (result.template_kwargs["reasoning_effort"], result.prompt) == (
        "high",
        '<s>[MODEL_SETTINGS]{"reasoning_effort": "high"}[/MODEL_SETTINGS][INST]Weather in Paris?[/INST]',
    )
    assert template.render(ASKED, reasoning="off").prompt.startswith('<s>[MODEL_SETTINGS]{"reasoning_effort": "none"}')
