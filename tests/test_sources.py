"""Every template source, against real files: model folders, a Hugging Face cache laid out as huggingface_hub lays
it out, a local stand-in for the Hub, and GGUF files written with gguf's own writer."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import cache_repo, serve_props, write_folder, write_gguf
from huggingface_hub import constants, scan_cache_dir
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

from chatcaps.errors import SourceError, TemplateNotFoundError
from chatcaps.sources import (
    TemplateSource,
    from_dir,
    from_file,
    from_gguf,
    from_hub,
    from_llama_server,
    from_str,
    from_tokenizer_config,
)

JINJA = "{% for m in messages %}[jinja]{{ m.content }}{% endfor %}"
LEGACY = "{% for m in messages %}[json]{{ m.content }}{% endfor %}"
CONFIG = "{% for m in messages %}[config]{{ m.content }}{% endfor %}"
TOOL_USE = "{% for m in messages %}[tool_use]{{ m.content }}{% endfor %}"
RAG = "{% for m in messages %}[rag]{{ m.content }}{% endfor %}"
COMMIT_A = "a" * 40
COMMIT_B = "b" * 40


# --- from_str / from_file ---------------------------------------------------------------------------------------


def test_from_str_keeps_text_and_tokens() -> None:
    source = from_str(JINJA, bos_token="<s>", eos_token="</s>")
    assert source == TemplateSource(JINJA, "<string>", "<s>", "</s>", "str")
    assert source.sha256 == hashlib.sha256(JINJA.encode("utf-8")).hexdigest()


def test_from_str_name_labels_the_source() -> None:
    assert from_str("x", name="mine").name == "mine"


def test_from_file_reads_jinja_as_is(tmp_path: Path) -> None:
    text = "{{ bos_token }}é\n{%- if x %}\n  y\n{% endif %}\n\n"
    file = write_folder(tmp_path, {"t.jinja": text}) / "t.jinja"
    assert from_file(file, eos_token="</s>") == TemplateSource(text, str(file), "", "</s>", "file")


def test_from_file_delegates_tokenizer_config(tmp_path: Path) -> None:
    config = {"chat_template": CONFIG, "bos_token": "<s>", "eos_token": "</s>"}
    file = write_folder(tmp_path, {"tokenizer_config.json": config}) / "tokenizer_config.json"
    assert from_file(file) == TemplateSource(CONFIG, str(file), "<s>", "</s>", "tokenizer_config")
    assert from_file(file, eos_token="<|eot|>").eos_token == "<|eot|>"


def test_from_file_delegates_chat_template_json(tmp_path: Path) -> None:
    file = write_folder(tmp_path, {"chat_template.json": {"chat_template": LEGACY}}) / "chat_template.json"
    assert from_file(file) == TemplateSource(LEGACY, str(file), "", "", "tokenizer_config")


def test_from_file_delegates_gguf(tmp_path: Path) -> None:
    file = write_gguf(tmp_path / "m.gguf", JINJA)
    assert from_file(file) == TemplateSource(JINJA, str(file), "<s>", "</s>", "gguf")


def test_from_file_missing_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jinja"
    with pytest.raises(SourceError, match=f"^{missing}: no such file$"):
        from_file(missing)


def test_from_file_on_a_folder_points_to_from_dir(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"is a folder \(use from_dir\)"):
        from_file(tmp_path)


# --- from_dir -----------------------------------------------------------------------------------------------------

PRECEDENCE = [
    pytest.param(
        {"chat_template.jinja": JINJA, "chat_template.json": {"chat_template": LEGACY}, "tokenizer_config.json": {}},
        JINJA,
        "chat_template.jinja",
        id="jinja-over-json",
    ),
    pytest.param(
        {"chat_template.jinja": JINJA, "tokenizer_config.json": {"chat_template": CONFIG}},
        JINJA,
        "chat_template.jinja",
        id="jinja-over-config",
    ),
    pytest.param(
        {"chat_template.json": {"chat_template": LEGACY}, "tokenizer_config.json": {"chat_template": CONFIG}},
        LEGACY,
        "chat_template.json",
        id="json-over-config",
    ),
    pytest.param(
        {"tokenizer_config.json": {"chat_template": CONFIG}},
        CONFIG,
        "tokenizer_config.json",
        id="config-alone",
    ),
    pytest.param(
        {
            "chat_template.jinja": JINJA,
            "tokenizer_config.json": {"chat_template": [{"name": "default", "template": CONFIG}]},
        },
        JINJA,
        "chat_template.jinja",
        id="jinja-over-config-list",
    ),
]


@pytest.mark.parametrize(("files", "text", "winner"), PRECEDENCE)
def test_from_dir_precedence(tmp_path: Path, files: Mapping[str, Any], text: str, winner: str) -> None:
    write_folder(tmp_path, files)
    assert from_dir(tmp_path) == TemplateSource(text, str(tmp_path / winner), "", "", "dir")


def test_from_dir_named_list_in_config(tmp_path: Path) -> None:
    named = [{"name": "default", "template": CONFIG}, {"name": "tool_use", "template": TOOL_USE}]
    write_folder(tmp_path, {"tokenizer_config.json": {"chat_template": named, "bos_token": "<s>"}})
    config = str(tmp_path / "tokenizer_config.json")
    assert from_dir(tmp_path) == TemplateSource(CONFIG, config, "<s>", "", "dir")
    assert from_dir(tmp_path, name="tool_use") == TemplateSource(TOOL_USE, config, "<s>", "", "dir")


def test_from_dir_additional_chat_templates(tmp_path: Path) -> None:
    write_folder(
        tmp_path,
        {
            "chat_template.jinja": JINJA,
            "additional_chat_templates/tool_use.jinja": TOOL_USE,
            "additional_chat_templates/rag.jinja": RAG,
            "additional_chat_templates/notes.txt": "not a template",
        },
    )
    assert from_dir(tmp_path).text == JINJA
    assert from_dir(tmp_path, name="default").text == JINJA
    named = from_dir(tmp_path, name="tool_use")
    assert named == TemplateSource(TOOL_USE, str(tmp_path / "additional_chat_templates/tool_use.jinja"), origin="dir")
    with pytest.raises(
        TemplateNotFoundError, match="no chat template named 'notes'; it has 'default', 'rag', 'tool_use'"
    ):
        from_dir(tmp_path, name="notes")


def test_from_dir_template_files_hide_config_templates(tmp_path: Path) -> None:
    # transformers replaces tokenizer_config's chat_template as soon as any template file exists.
    write_folder(
        tmp_path,
        {"additional_chat_templates/tool_use.jinja": TOOL_USE, "tokenizer_config.json": {"chat_template": CONFIG}},
    )
    with pytest.raises(TemplateNotFoundError, match="only named chat templates \\('tool_use'\\)") as caught:
        from_dir(tmp_path)
    assert caught.value.available == ("tool_use",)


def test_from_dir_added_token_dicts(tmp_path: Path) -> None:
    bos = {"__type": "AddedToken", "content": "<|begin|>", "lstrip": False, "normalized": False}
    eos = {"__type": "AddedToken", "content": "<|end|>", "rstrip": False, "special": True}
    write_folder(
        tmp_path, {"chat_template.jinja": JINJA, "tokenizer_config.json": {"bos_token": bos, "eos_token": eos}}
    )
    source = from_dir(tmp_path)
    assert (source.bos_token, source.eos_token) == ("<|begin|>", "<|end|>")


def test_from_dir_legacy_special_tokens_map_overrides_config(tmp_path: Path) -> None:
    write_folder(
        tmp_path,
        {
            "tokenizer_config.json": {"chat_template": CONFIG, "bos_token": None, "eos_token": "<eos-config>"},
            "special_tokens_map.json": {"bos_token": {"content": "<bos-map>"}, "eos_token": "<eos-map>"},
        },
    )
    source = from_dir(tmp_path)
    assert (source.bos_token, source.eos_token) == ("<bos-map>", "<eos-map>")


def test_from_dir_special_tokens_map_ignored_beside_added_tokens_decoder(tmp_path: Path) -> None:
    write_folder(
        tmp_path,
        {
            "tokenizer_config.json": {"chat_template": CONFIG, "eos_token": "<eos-config>", "added_tokens_decoder": {}},
            "special_tokens_map.json": {"bos_token": "<bos-map>", "eos_token": "<eos-map>"},
        },
    )
    source = from_dir(tmp_path)
    assert (source.bos_token, source.eos_token) == ("", "<eos-config>")


def test_from_dir_without_template_lists_what_it_looked_for(tmp_path: Path) -> None:
    write_folder(tmp_path, {"tokenizer_config.json": {"bos_token": "<s>"}})
    with pytest.raises(TemplateNotFoundError) as caught:
        from_dir(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path}: no chat template (looked for chat_template.jinja, chat_template.json, "
        "additional_chat_templates/*.jinja, tokenizer_config.json (key 'chat_template'))"
    )
    assert caught.value.available == ()


def test_from_dir_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=f"^{tmp_path / 'gone'}: no such folder$"):
        from_dir(tmp_path / "gone")


def test_from_dir_bad_json_names_the_file(tmp_path: Path) -> None:
    write_folder(tmp_path, {"tokenizer_config.json": "{not json"})
    with pytest.raises(SourceError, match=f"^{tmp_path / 'tokenizer_config.json'}: not valid JSON"):
        from_dir(tmp_path)


# The same folders through transformers itself: what from_dir returns is what AutoTokenizer would render with.
DEFAULT_AND_TOOL_USE = [{"name": "default", "template": CONFIG}, {"name": "tool_use", "template": TOOL_USE}]
TRANSFORMERS_LAYOUTS = [
    pytest.param({"chat_template.jinja": JINJA}, {"chat_template": CONFIG}, None, JINJA, id="jinja-over-config"),
    pytest.param({}, {"chat_template": CONFIG}, None, CONFIG, id="config-string"),
    pytest.param({}, {"chat_template": DEFAULT_AND_TOOL_USE}, None, CONFIG, id="config-list-default"),
    pytest.param({}, {"chat_template": DEFAULT_AND_TOOL_USE}, "tool_use", TOOL_USE, id="config-list-named"),
    pytest.param(
        {"chat_template.jinja": JINJA, "additional_chat_templates/tool_use.jinja": TOOL_USE},
        {"chat_template": CONFIG},
        "tool_use",
        TOOL_USE,
        id="additional-named",
    ),
    pytest.param(
        {"additional_chat_templates/tool_use.jinja": TOOL_USE},
        {"chat_template": CONFIG},
        None,
        None,
        id="additional-hides-config",
    ),
    pytest.param({}, {"chat_template": DEFAULT_AND_TOOL_USE[1:]}, None, None, id="config-list-no-default"),
]


@pytest.mark.parametrize(("files", "config", "name", "expected"), TRANSFORMERS_LAYOUTS)
def test_from_dir_agrees_with_transformers(
    tmp_path: Path, files: Mapping[str, str], config: Mapping[str, Any], name: str | None, expected: str | None
) -> None:
    auto_tokenizer = pytest.importorskip("transformers").AutoTokenizer
    tokenizers = pytest.importorskip("tokenizers")
    tokens = {"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"}
    write_folder(tmp_path, {**files, "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", **config}})
    write_folder(tmp_path, {"special_tokens_map.json": tokens})
    vocabulary = tokenizers.models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2}, unk_token="<unk>")
    tokenizers.Tokenizer(vocabulary).save(str(tmp_path / "tokenizer.json"))
    tokenizer = auto_tokenizer.from_pretrained(tmp_path)
    if expected is None:
        with pytest.raises(ValueError, match="multiple chat templates with no default"):
            tokenizer.get_chat_template(name)
        with pytest.raises(TemplateNotFoundError, match="none called 'default'"):
            from_dir(tmp_path, name=name)
    else:
        source = from_dir(tmp_path, name=name)
        assert (tokenizer.get_chat_template(name), tokenizer.bos_token, tokenizer.eos_token) == (
            expected,
            "<s>",
            "</s>",
        )
        assert (source.text, source.bos_token, source.eos_token) == (expected, "<s>", "</s>")


# --- from_tokenizer_config ----------------------------------------------------------------------------------------


def test_from_tokenizer_config_mapping_with_string_template() -> None:
    config = {"chat_template": CONFIG, "bos_token": "<s>", "eos_token": {"content": "</s>"}}
    expected = TemplateSource(CONFIG, "<tokenizer_config>", "<s>", "</s>", "tokenizer_config")
    assert from_tokenizer_config(config) == expected


def test_from_tokenizer_config_path(tmp_path: Path) -> None:
    file = write_folder(tmp_path, {"tokenizer_config.json": {"chat_template": CONFIG}}) / "tokenizer_config.json"
    assert from_tokenizer_config(file) == TemplateSource(CONFIG, str(file), origin="tokenizer_config")
    assert from_tokenizer_config(str(file)).text == CONFIG


def test_from_tokenizer_config_named_list() -> None:
    config = {"chat_template": [{"name": "tool_use", "template": TOOL_USE}, {"name": "rag", "template": RAG}]}
    assert from_tokenizer_config(config, name="rag").text == RAG
    with pytest.raises(TemplateNotFoundError) as caught:
        from_tokenizer_config(config)
    assert str(caught.value) == (
        "<tokenizer_config>: has only named chat templates ('rag', 'tool_use'), none called 'default': "
        "pass name= to pick one"
    )
    assert caught.value.available == ("rag", "tool_use")


def test_from_tokenizer_config_named_list_with_default() -> None:
    config = {"chat_template": [{"name": "tool_use", "template": TOOL_USE}, {"name": "default", "template": CONFIG}]}
    assert from_tokenizer_config(config).text == CONFIG


def test_from_tokenizer_config_unknown_name() -> None:
    with pytest.raises(TemplateNotFoundError, match="no chat template named 'rag'; it has 'default'") as caught:
        from_tokenizer_config({"chat_template": CONFIG}, name="rag")
    assert caught.value.available == ("default",)


def test_from_tokenizer_config_without_template() -> None:
    with pytest.raises(TemplateNotFoundError, match=r"^<tokenizer_config>: no chat template \(looked for key"):
        from_tokenizer_config({"bos_token": "<s>"})


def test_from_tokenizer_config_malformed_template() -> None:
    with pytest.raises(SourceError, match="'chat_template' must be a string or a list"):
        from_tokenizer_config({"chat_template": [{"name": "x"}]})


def test_from_tokenizer_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        from_tokenizer_config(tmp_path / "tokenizer_config.json")


# --- from_hub: a real cache folder, and a local stand-in for the Hub ---------------------------------------------


class _MissingRepoHub(BaseHTTPRequestHandler):
    """Answers every request as the Hub answers for a repo that does not exist, and records the paths asked."""

    requests: list[str]

    def do_GET(self) -> None:
        self.requests.append(self.path)
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output clean."""


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Online mode, with the Hub endpoint (HF_ENDPOINT, read into constants.ENDPOINT at import) pointed at a local
    server; yields the paths it was asked for. Nothing reaches the real Hub."""
    requests: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_MissingRepoHub,), {"requests": requests}))
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield requests
    server.shutdown()
    server.server_close()


@pytest.fixture
def offline(hub: list[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """HF_HUB_OFFLINE=1 set after huggingface_hub was imported (its own constant still says online): from_hub must
    read the variable itself. The Hub stand-in proves no request was made."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
    assert hub == []


@pytest.mark.usefixtures("offline")
def test_from_hub_reads_chat_template_jinja_from_cache(tmp_path: Path) -> None:
    config = json.dumps({"chat_template": CONFIG, "bos_token": "<s>", "eos_token": "</s>"})
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": JINJA, "tokenizer_config.json": config}, commit=COMMIT_A)
    source = from_hub("org/model", cache_dir=tmp_path)
    assert source == TemplateSource(JINJA, "org/model@main:chat_template.jinja", "<s>", "</s>", "hub")


@pytest.mark.usefixtures("offline")
def test_from_hub_reads_tokenizer_config_from_cache(tmp_path: Path) -> None:
    config = json.dumps({"chat_template": CONFIG, "eos_token": {"content": "<|eot|>"}})
    cache_repo(tmp_path, "org/model", {"tokenizer_config.json": config, "config.json": "{}"}, commit=COMMIT_A)
    source = from_hub("org/model", cache_dir=str(tmp_path))
    assert source == TemplateSource(CONFIG, "org/model@main:tokenizer_config.json", "", "<|eot|>", "hub")


@pytest.mark.usefixtures("offline")
def test_from_hub_revision_as_commit_hash(tmp_path: Path) -> None:
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": JINJA}, commit=COMMIT_A)
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": TOOL_USE}, commit=COMMIT_B, ref=None)
    assert from_hub("org/model", cache_dir=tmp_path).text == JINJA
    source = from_hub("org/model", revision=COMMIT_B, cache_dir=tmp_path)
    assert source == TemplateSource(TOOL_USE, f"org/model@{COMMIT_B}:chat_template.jinja", origin="hub")


@pytest.mark.usefixtures("offline")
def test_from_hub_additional_chat_templates(tmp_path: Path) -> None:
    files = {"chat_template.jinja": JINJA, "additional_chat_templates/tool_use.jinja": TOOL_USE}
    cache_repo(tmp_path, "org/model", files, commit=COMMIT_A)
    source = from_hub("org/model", name="tool_use", cache_dir=tmp_path)
    assert source == TemplateSource(TOOL_USE, "org/model@main:additional_chat_templates/tool_use.jinja", origin="hub")


@pytest.mark.usefixtures("offline")
def test_from_hub_cache_folder_is_what_huggingface_hub_expects(tmp_path: Path) -> None:
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": JINJA}, commit=COMMIT_A)
    (repo,) = scan_cache_dir(tmp_path).repos
    assert (repo.repo_id, repo.repo_type, set(repo.refs)) == ("org/model", "model", {"main"})
    ((revision, files),) = ((r.commit_hash, {f.file_name for f in r.files}) for r in repo.revisions)
    assert (revision, files) == (COMMIT_A, {"chat_template.jinja"})


@pytest.mark.usefixtures("offline")
def test_from_hub_repo_not_in_cache_fails_fast_and_says_why(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(TemplateNotFoundError) as caught:
        from_hub("org/absent", revision="v1", cache_dir=tmp_path)
    assert time.monotonic() - started < 5
    assert str(caught.value) == (
        f"org/absent@v1: not in the Hugging Face cache ({tmp_path}) and HF_HUB_OFFLINE is set; looked for "
        "chat_template.jinja, chat_template.json, additional_chat_templates/*.jinja, tokenizer_config.json "
        "(key 'chat_template'). Download the repo first (`hf download org/absent`) or set HF_HUB_OFFLINE=0."
    )
    assert isinstance(caught.value.__cause__, LocalEntryNotFoundError)


@pytest.mark.usefixtures("offline")
def test_from_hub_cached_repo_without_template(tmp_path: Path) -> None:
    cache_repo(tmp_path, "org/model", {"tokenizer_config.json": "{}"}, commit=COMMIT_A)
    with pytest.raises(TemplateNotFoundError, match=r"^org/model@main: no chat template .*HF_HUB_OFFLINE is set"):
        from_hub("org/model", cache_dir=tmp_path)


def test_from_hub_online_uses_the_cache_without_asking_the_hub(tmp_path: Path, hub: list[str]) -> None:
    cache_repo(tmp_path, "org/model", {"chat_template.jinja": JINJA}, commit=COMMIT_A)
    assert from_hub("org/model", cache_dir=tmp_path).text == JINJA
    assert hub == []


def test_from_hub_online_missing_repo(tmp_path: Path, hub: list[str]) -> None:
    with pytest.raises(TemplateNotFoundError) as caught:
        from_hub("org/absent", cache_dir=tmp_path)
    assert str(caught.value).startswith(
        f"org/absent@main: the Hub could not provide it and the cache ({tmp_path}) does not hold it; looked for "
        "chat_template.jinja, chat_template.json, additional_chat_templates/*.jinja, tokenizer_config.json "
        "(key 'chat_template'). RepositoryNotFoundError: "
    )
    assert isinstance(caught.value.__cause__, RepositoryNotFoundError)
    assert "/api/models/org/absent/revision/main" in hub


# --- from_gguf ----------------------------------------------------------------------------------------------------


def test_from_gguf_template_and_tokens(tmp_path: Path) -> None:
    file = write_gguf(tmp_path / "m.gguf", JINJA)
    assert from_gguf(file) == TemplateSource(JINJA, str(file), "<s>", "</s>", "gguf")


def test_from_gguf_named_templates(tmp_path: Path) -> None:
    named = [{"name": "default", "template": JINJA}, {"name": "tool_use", "template": TOOL_USE}]
    file = write_gguf(tmp_path / "m.gguf", named)
    assert from_gguf(file).text == JINJA
    assert from_gguf(str(file), name="tool_use") == TemplateSource(TOOL_USE, str(file), "<s>", "</s>", "gguf")


def test_from_gguf_only_named_templates_lists_them(tmp_path: Path) -> None:
    file = write_gguf(
        tmp_path / "m.gguf", [{"name": "rag", "template": RAG}, {"name": "tool_use", "template": TOOL_USE}]
    )
    with pytest.raises(TemplateNotFoundError, match=r"only named chat templates \('rag', 'tool_use'\)") as caught:
        from_gguf(file)
    assert caught.value.available == ("rag", "tool_use")


def test_from_gguf_without_template(tmp_path: Path) -> None:
    file = write_gguf(tmp_path / "m.gguf", None)
    with pytest.raises(TemplateNotFoundError) as caught:
        from_gguf(file)
    assert str(caught.value) == (
        f"{file}: no chat template (looked for keys 'tokenizer.chat_template' and 'tokenizer.chat_template.<name>')"
    )


def test_from_gguf_not_a_gguf(tmp_path: Path) -> None:
    file = write_folder(tmp_path, {"m.gguf": "plain text, not GGUF"}) / "m.gguf"
    with pytest.raises(SourceError, match=f"^{file}: not a readable GGUF file"):
        from_gguf(file)


def test_from_gguf_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=f"^{tmp_path / 'm.gguf'}: no such file$"):
        from_gguf(tmp_path / "m.gguf")


# --- from_llama_server: /props over real HTTP on loopback (the real llama-server is in test_llama_server.py) -------


@pytest.fixture
def props_server() -> Iterator[tuple[str, dict[str, Any]]]:
    """An HTTP server on 127.0.0.1 answering GET /props with the dict the test fills in, as llama-server does."""
    props: dict[str, Any] = {}
    with serve_props(props) as url:
        yield url, props


def test_from_llama_server_reads_props(props_server: tuple[str, dict[str, Any]]) -> None:
    url, props = props_server
    props.update(chat_template=JINJA, chat_template_tool_use=TOOL_USE, bos_token="<s>", eos_token="</s>")
    assert from_llama_server(url) == TemplateSource(JINJA, url, "<s>", "</s>", "llama_server")
    assert from_llama_server(url + "/props/", name="tool_use").text == TOOL_USE


def test_from_llama_server_without_template(props_server: tuple[str, dict[str, Any]]) -> None:
    url, props = props_server
    props.update(chat_template="", bos_token="<s>")
    with pytest.raises(TemplateNotFoundError, match=r"no chat template \(looked for keys 'chat_template', "):
        from_llama_server(url)


def test_from_llama_server_nobody_listening() -> None:
    with pytest.raises(SourceError, match=r"^http://127.0.0.1:9/props: the server did not answer: "):
        from_llama_server("http://127.0.0.1:9", timeout=2)
    with pytest.raises(SourceError, match="starts with http"):
        from_llama_server("127.0.0.1:8080")
