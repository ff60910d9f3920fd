"""Where chat templates come from: a string, a file, a model folder, a tokenizer_config, the Hub, a GGUF, a server.

Every loader returns a `TemplateSource`: the template text plus the bos/eos tokens that came with it, so a template
renders the way it does in the library that ships it.

A model folder is read the way transformers 5.23 reads it (cited at each step below):

1. template files win over `tokenizer_config.json`: `chat_template.jinja` is the "default" template and
   `additional_chat_templates/<name>.jinja` the named ones; when any of them exists, `tokenizer_config.json`'s
   `chat_template` is ignored (tokenization_utils_base.py:1812-1829);
2. `chat_template.json` (`{"chat_template": str}`, the legacy processor file read at processing_utils.py:1393-1398
   and 1467-1471) stands in for a missing `chat_template.jinja` (the order of the two: see `_default_file_template`);
3. otherwise `tokenizer_config.json["chat_template"]`: a string is the default template, a list of
   `{"name", "template"}` becomes named templates (tokenization_utils_base.py:1083-1087);
4. without `name=`, "default" is used, and a source holding only other names is an error
   (tokenization_utils_base.py:3341-3356, `get_chat_template`);
5. bos/eos come from tokenizer_config.json, overridden by a legacy special_tokens_map.json (see `_special_tokens`).

A running llama-server is read through its `/props` endpoint, which reports the template it renders with and its
bos/eos tokens (tools/server/server-context.cpp, the `/props` handler).

Heavy optional imports (huggingface_hub, gguf) happen inside the loaders that need them, so importing chatcaps
stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chatcaps import encoders
from chatcaps.constants import hf_offline
from chatcaps.defaults import PROPS_TIMEOUT_S
from chatcaps.errors import SourceError, TemplateNotFoundError
from chatcaps.transport import LlamaServerTransport, base_url

_DEFAULT = "default"
_JINJA_FILE = "chat_template.jinja"  # transformers.utils.hub.CHAT_TEMPLATE_FILE
_LEGACY_JSON_FILE = "chat_template.json"  # transformers.utils.hub.LEGACY_PROCESSOR_CHAT_TEMPLATE_FILE
_NAMED_DIR = "additional_chat_templates"  # transformers.utils.hub.CHAT_TEMPLATE_DIR
_CONFIG_FILE = "tokenizer_config.json"
_SPECIAL_TOKENS_FILE = "special_tokens_map.json"
_FOLDER_LOOKED_FOR = f"{_JINJA_FILE}, {_LEGACY_JSON_FILE}, {_NAMED_DIR}/*.jinja, {_CONFIG_FILE} (key 'chat_template')"
_HUB_PATTERNS = (_JINJA_FILE, _LEGACY_JSON_FILE, f"{_NAMED_DIR}/*.jinja", _CONFIG_FILE, _SPECIAL_TOKENS_FILE)
_GGUF_TEMPLATE_KEY = "tokenizer.chat_template"
_GGUF_TOKENS_KEY = "tokenizer.ggml.tokens"
_SERVER_TEMPLATE_KEYS = {_DEFAULT: "chat_template", "tool_use": "chat_template_tool_use"}

# template name -> (text, label of the file it came from)
_Templates = dict[str, tuple[str, str]]


@dataclass(frozen=True)
class TemplateSource:
    """A chat template's text and the special tokens that came with it.

    `name` labels the template in errors (a path, "repo_id@revision:file", "<string>", a server URL); `origin` says
    which loader read it: "str", "file", "dir", "tokenizer_config", "tokenizer", "hub", "gguf", "llama_server" or
    "encoder" (the text is then a prompt encoder's declaration: see `from_encoder`).
    """

    text: str
    name: str
    bos_token: str = ""
    eos_token: str = ""
    origin: str = "str"

    @property
    def sha256(self) -> str:
        """Hex sha256 of the UTF-8 text: identifies a template across sources and copies."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def from_str(text: str, *, name: str = "<string>", bos_token: str = "", eos_token: str = "") -> TemplateSource:
    """A template given as text."""
    return TemplateSource(text, name, bos_token, eos_token, "str")


def from_file(path: str | os.PathLike[str], *, bos_token: str = "", eos_token: str = "") -> TemplateSource:
    """A template file: `.jinja` (or any text) as is; `.json` as a tokenizer_config/chat_template.json; `.gguf`; a
    Mistral tokenizer file by its name (`tekken*.json`, `*.model.v<N>`) as its encoder (`from_mistral`).

    Tokens given here override those the file carries.
    """
    file = Path(path)
    if is_mistral_tokenizer(file):
        source = from_mistral(file)
    elif file.suffix == ".json":
        source = from_tokenizer_config(file)
    elif file.suffix == ".gguf":
        source = from_gguf(file)
    else:
        source = TemplateSource(_read_text(file), str(file), origin="file")
    return replace(source, bos_token=bos_token or source.bos_token, eos_token=eos_token or source.eos_token)


def from_encoder(name: str) -> TemplateSource:
    """A model's prompt encoder (`chatcaps.encoders`, by one of `encoders.names()`): its declaration as the text,
    origin "encoder"; a `ChatTemplate` renders it with the encoder itself."""
    return _encoder_source(encoders.encoder(name))


def from_mistral(path_or_version: str | os.PathLike[str]) -> TemplateSource:
    """A Mistral tokenizer file (`tekken.json`, `tokenizer.model.v*`), or one mistral-common ships by its version name
    ("v3", "tekken"), as its encoder: the prompt is mistral-common's `encode_chat_completion` (docs/encoders.md)."""
    return _encoder_source(encoders.from_mistral(path_or_version))


def is_mistral_tokenizer(path: str | os.PathLike[str]) -> bool:
    """The file is a Mistral tokenizer by its name: `tekken*.json`, or SentencePiece's `*.model.v<N>`."""
    return bool(encoders.mistral.FILE_NAME.fullmatch(Path(path).name))


def _encoder_source(found: encoders.Encoder) -> TemplateSource:
    return TemplateSource(found.declaration, found.name, found.bos_token, found.eos_token, "encoder")


def from_dir(path: str | os.PathLike[str], *, name: str | None = None) -> TemplateSource:
    """A model folder, read as transformers reads it (see the module docstring); `name` picks a named template. A
    folder that holds a prompt encoder's file (DeepSeek-V3.2's `encoding/encoding_dsv32.py`, Mistral's `tekken.json`
    or `tokenizer.model.v*`) is that encoder (`from_encoder`), as vLLM reads it, unless `name` asks for a template."""
    root = Path(path)
    if not root.is_dir():
        raise SourceError(f"{root}: {'not a folder (use from_file)' if root.exists() else 'no such folder'}")
    found = encoders.in_folder(root) if name is None else None
    if found is not None:
        return _encoder_source(found)
    return _load_folder(_Folder(root, f"{root}{os.sep}"), name, origin="dir", where=str(root))


def from_tokenizer_config(
    config: str | os.PathLike[str] | Mapping[str, Any], *, name: str | None = None
) -> TemplateSource:
    """The template inside a tokenizer_config.json (a path, or the already-loaded mapping)."""
    if isinstance(config, Mapping):
        data, label = config, "<tokenizer_config>"
    else:
        label = os.fspath(config)
        data = _parse_json(_read_text(Path(config)), label)
    text, _ = _pick(_config_templates(data, label), name, where=label, looked_for="key 'chat_template'")
    return TemplateSource(text, label, _token(data, "bos_token"), _token(data, "eos_token"), "tokenizer_config")


def from_tokenizer(tokenizer: Any, *, name: str | None = None) -> TemplateSource:
    """A loaded transformers tokenizer's `chat_template` (a string, or a dict of named templates) and its bos/eos
    tokens, read by attribute so that transformers is not imported here."""
    raw = getattr(tokenizer, "chat_template", None)
    label = getattr(tokenizer, "name_or_path", "") or f"<{type(tokenizer).__name__}>"
    if raw is None:
        templates: _Templates = {}
    elif isinstance(raw, str):
        templates = {_DEFAULT: (raw, label)}
    elif isinstance(raw, Mapping) and all(isinstance(text, str) for text in raw.values()):
        templates = {str(key): (text, f"{label}:{key}") for key, text in raw.items()}
    else:
        raise SourceError(f"{label}: tokenizer.chat_template must be a string or a dict of strings")
    text, where = _pick(templates, name, where=label, looked_for="tokenizer.chat_template")
    bos, eos = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "eos_token", None)
    return TemplateSource(
        text, where, bos if isinstance(bos, str) else "", eos if isinstance(eos, str) else "", "tokenizer"
    )


def from_hub(
    repo_id: str,
    *,
    revision: str | None = None,
    name: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> TemplateSource:
    """A Hub repo, read like `from_dir`; offline-first.

    The Hugging Face cache (default: the standard one, so whatever transformers downloaded is found) is asked first
    and, when it holds the template, the network is never touched. Only when it does not, and HF_HUB_OFFLINE is not
    set, are the template files (and nothing else) downloaded into that cache.
    """
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

    where = f"{repo_id}@{revision or 'main'}"
    looked_for = f"looked for {_FOLDER_LOOKED_FOR}"
    try:
        try:
            return _load_hub_snapshot(repo_id, revision, name, cache_dir, local_files_only=True)
        except LocalEntryNotFoundError as error:
            if _hub_offline():
                raise TemplateNotFoundError(
                    f"{where}: not in the Hugging Face cache ({_hub_cache(cache_dir)}) and HF_HUB_OFFLINE is set; "
                    f"{looked_for}. Download the repo first (`hf download {repo_id}`) or set HF_HUB_OFFLINE=0."
                ) from error
        except TemplateNotFoundError as error:
            if _hub_offline():
                raise TemplateNotFoundError(
                    f"{error} (HF_HUB_OFFLINE is set, so only the cached snapshot was searched: "
                    "set HF_HUB_OFFLINE=0 to ask the Hub)",
                    available=error.available,
                ) from error
        return _load_hub_snapshot(repo_id, revision, name, cache_dir, local_files_only=False)
    except HFValidationError as error:
        raise SourceError(f"{repo_id!r} is not a valid Hub repo id: {error}") from error
    except (HfHubHTTPError, LocalEntryNotFoundError) as error:
        raise TemplateNotFoundError(
            f"{where}: the Hub could not provide it and the cache ({_hub_cache(cache_dir)}) does not hold it; "
            f"{looked_for}. {type(error).__name__}: {error}"
        ) from error


def from_gguf(path: str | os.PathLike[str], *, name: str | None = None) -> TemplateSource:
    """The template a GGUF model carries; bos/eos are looked up in its token list by id, as llama.cpp does."""
    label = os.fspath(path)
    fields = _gguf_fields(Path(path))
    templates = {
        _DEFAULT if key == _GGUF_TEMPLATE_KEY else key.removeprefix(f"{_GGUF_TEMPLATE_KEY}."): (
            str(field.contents()),
            label,
        )
        for key, field in fields.items()
        if key == _GGUF_TEMPLATE_KEY or key.startswith(f"{_GGUF_TEMPLATE_KEY}.")
    }
    looked_for = f"keys '{_GGUF_TEMPLATE_KEY}' and '{_GGUF_TEMPLATE_KEY}.<name>'"
    text, _ = _pick(templates, name, where=label, looked_for=looked_for)
    bos = _gguf_token(fields, "tokenizer.ggml.bos_token_id", label)
    eos = _gguf_token(fields, "tokenizer.ggml.eos_token_id", label)
    return TemplateSource(text, label, bos, eos, "gguf")


def server_props(url: str, *, timeout: float = PROPS_TIMEOUT_S) -> Mapping[str, Any]:
    """A llama-server's `/props` JSON (`url`: the server's root; a pasted `/props` or `/v1` is dropped).

    Raises `ServerError` (a `SourceError`) when the server does not answer or answers with anything but a JSON object.
    """
    with LlamaServerTransport(url, timeout=timeout) as server:
        return server.get_json("/props")


def from_llama_server(url: str, *, name: str | None = None, timeout: float = PROPS_TIMEOUT_S) -> TemplateSource:
    """The template a running llama-server renders with, from `/props`; `name="tool_use"` picks its tool-use template.

    bos/eos are the server's own token texts. Without `--jinja` a server may report a template it does not run
    through Jinja; the text is still the model's template. The text is llama.cpp's lexer source, not the file's bytes:
    line ends normalised to `\n` and one trailing newline dropped (common/jinja/lexer.cpp; jinja2 drops it too, so
    renders are the same, but the sha256 differs from the GGUF's), and llama.cpp's own fixes to two known templates
    applied (common/chat.cpp, `common_chat_templates_init`).
    """
    with LlamaServerTransport(url, timeout=timeout) as server:
        return from_server_props(server.get_json("/props"), url=server.url, name=name)


def from_server_props(props: Mapping[str, Any], *, url: str, name: str | None = None) -> TemplateSource:
    """The template in an already-read `/props` JSON (see `from_llama_server`); the server's root URL labels it."""
    label = base_url(url)
    templates = {
        key: (text, label)
        for key, prop in _SERVER_TEMPLATE_KEYS.items()
        if isinstance(text := props.get(prop), str) and text
    }
    looked_for = "keys " + ", ".join(f"'{prop}'" for prop in _SERVER_TEMPLATE_KEYS.values()) + " in /props"
    text, _ = _pick(templates, name, where=label, looked_for=looked_for)
    return TemplateSource(text, label, _token(props, "bos_token"), _token(props, "eos_token"), "llama_server")


@dataclass(frozen=True)
class _Folder:
    """A model folder on disk; `label_prefix` names its files in errors (a folder path, or "repo@revision:")."""

    root: Path
    label_prefix: str

    def label(self, filename: str) -> str:
        return self.label_prefix + filename

    def read(self, filename: str) -> str | None:
        """The file's text, or None when it does not exist."""
        file = self.root / filename
        return _read_text(file, self.label(filename)) if file.is_file() else None

    def read_json(self, filename: str) -> Mapping[str, Any] | None:
        text = self.read(filename)
        return None if text is None else _parse_json(text, self.label(filename))

    def named(self) -> tuple[str, ...]:
        """Names of the templates under additional_chat_templates/ (tokenization_utils_base.py:1691-1696)."""
        return tuple(sorted(p.stem for p in (self.root / _NAMED_DIR).glob("*.jinja") if p.is_file()))


def _load_folder(folder: _Folder, name: str | None, *, origin: str, where: str) -> TemplateSource:
    config = folder.read_json(_CONFIG_FILE) or {}
    templates = _file_templates(folder) or _config_templates(config, folder.label(_CONFIG_FILE))
    text, label = _pick(templates, name, where=where, looked_for=_FOLDER_LOOKED_FOR)
    tokens = _special_tokens(config, folder)
    return TemplateSource(text, label, _token(tokens, "bos_token"), _token(tokens, "eos_token"), origin)


def _special_tokens(config: Mapping[str, Any], folder: _Folder) -> Mapping[str, Any]:
    """Where bos/eos come from: transformers 5 reads special_tokens_map.json only when tokenizer_config.json has no
    `added_tokens_decoder`, and then lets the map override the config (tokenization_utils_base.py:1879-1909)."""
    if "added_tokens_decoder" in config:
        return config
    return {**config, **(folder.read_json(_SPECIAL_TOKENS_FILE) or {})}


def _file_templates(folder: _Folder) -> _Templates:
    """The folder's template files; the named ones are read after the default, so, as in transformers
    (tokenization_utils_base.py:1816-1825), an additional_chat_templates/default.jinja would replace it."""
    templates: _Templates = {}
    default = _default_file_template(folder)
    if default is not None:
        templates[_DEFAULT] = default
    for template_name in folder.named():
        filename = f"{_NAMED_DIR}/{template_name}.jinja"
        templates[template_name] = (_read_text(folder.root / filename, folder.label(filename)), folder.label(filename))
    return templates


def _default_file_template(folder: _Folder) -> tuple[str, str] | None:
    """chat_template.jinja, else the legacy chat_template.json.

    Deviation, kept on purpose: transformers' processor lets chat_template.json win when both exist
    (processing_utils.py:1467), while its tokenizer never reads chat_template.json at all; the .jinja file is the
    format both are moving to ("a raw chat_template.jinja is preferred in future", processing_utils.py:1394).
    """
    text = folder.read(_JINJA_FILE)
    if text is not None:
        return text, folder.label(_JINJA_FILE)
    legacy = folder.read_json(_LEGACY_JSON_FILE)
    if legacy is None:
        return None
    template = legacy.get("chat_template")
    if not isinstance(template, str):
        raise SourceError(f"{folder.label(_LEGACY_JSON_FILE)}: 'chat_template' is not a string")
    return template, folder.label(_LEGACY_JSON_FILE)


def _config_templates(config: Mapping[str, Any], label: str) -> _Templates:
    """A config's `chat_template`: a string is the default; a list of {"name", "template"} holds named ones."""
    raw = config.get("chat_template")
    if raw is None:
        return {}
    if isinstance(raw, str):
        return {_DEFAULT: (raw, label)}
    if isinstance(raw, list) and all(_is_named_template(item) for item in raw):
        return {item["name"]: (item["template"], label) for item in raw}
    raise SourceError(f"{label}: 'chat_template' must be a string or a list of {{'name': ..., 'template': ...}}")


def _is_named_template(item: object) -> bool:
    return isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("template"), str)


def _pick(templates: _Templates, name: str | None, *, where: str, looked_for: str) -> tuple[str, str]:
    """The template called `name`, or "default" when no name is given (transformers' `get_chat_template`)."""
    available = tuple(sorted(templates))
    listed = ", ".join(repr(n) for n in available)
    if not templates:
        raise TemplateNotFoundError(f"{where}: no chat template (looked for {looked_for})")
    if name is None and _DEFAULT not in templates:
        raise TemplateNotFoundError(
            f"{where}: has only named chat templates ({listed}), none called 'default': pass name= to pick one",
            available=available,
        )
    key = _DEFAULT if name is None else name
    if key not in templates:
        raise TemplateNotFoundError(f"{where}: no chat template named {key!r}; it has {listed}", available=available)
    return templates[key]


def _token(config: Mapping[str, Any], key: str) -> str:
    """A special token as tokenizer configs store it: a string, or an AddedToken dict {"content": ...}."""
    value = config.get(key)
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _read_text(file: Path, label: str | None = None) -> str:
    """The file's text, decoded as transformers decodes it (UTF-8, universal newlines)."""
    label = label or str(file)
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise SourceError(f"{label}: no such file") from error
    except IsADirectoryError as error:
        raise SourceError(f"{label}: is a folder (use from_dir)") from error
    except (OSError, UnicodeDecodeError) as error:
        raise SourceError(f"{label}: cannot read it as UTF-8 text: {error}") from error


def _parse_json(text: str, label: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise SourceError(f"{label}: not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise SourceError(f"{label}: expected a JSON object, found {type(data).__name__}")
    return data


def _load_hub_snapshot(
    repo_id: str,
    revision: str | None,
    name: str | None,
    cache_dir: str | os.PathLike[str] | None,
    *,
    local_files_only: bool,
) -> TemplateSource:
    """Read the repo's snapshot folder in the cache, first downloading the template files unless local_files_only.

    Going through `snapshot_download` keeps huggingface_hub's own cache logic: refs/<revision> or a commit hash
    picks the snapshot, and (hub >= 2) a cached tree listing reports a snapshot that lacks some template file as
    incomplete rather than letting a lower-precedence file win.
    """
    from huggingface_hub import snapshot_download

    snapshot = snapshot_download(
        repo_id,
        revision=revision,
        cache_dir=None if cache_dir is None else Path(cache_dir),
        allow_patterns=list(_HUB_PATTERNS),
        local_files_only=local_files_only,
    )
    where = f"{repo_id}@{revision or 'main'}"
    return _load_folder(_Folder(Path(snapshot), f"{where}:"), name, origin="hub", where=where)


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, read again now: the hub reads it once, at import."""
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or hf_offline()


def _hub_cache(cache_dir: str | os.PathLike[str] | None) -> str:
    from huggingface_hub import constants

    return os.fspath(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE


def _gguf_fields(file: Path) -> Mapping[str, Any]:
    """The GGUF's key/value fields (the reader maps the file; tensors are not loaded)."""
    try:
        from gguf import GGUFReader
    except ModuleNotFoundError as error:
        raise SourceError("reading GGUF files needs the gguf package: pip install 'chatcaps[gguf]'") from error
    if not file.is_file():
        raise SourceError(f"{file}: no such file")
    try:
        fields: Mapping[str, Any] = GGUFReader(file).fields
    except (OSError, ValueError) as error:
        raise SourceError(f"{file}: not a readable GGUF file: {error}") from error
    return fields


def _gguf_token(fields: Mapping[str, Any], id_key: str, label: str) -> str:
    """The token whose id `id_key` holds, or "" when the GGUF has no such id or no token list."""
    id_field, tokens = fields.get(id_key), fields.get(_GGUF_TOKENS_KEY)
    if id_field is None or tokens is None:
        return ""
    token_id = int(id_field.contents())
    if not 0 <= token_id < len(tokens.data):
        raise SourceError(f"{label}: {id_key} is {token_id}, outside the {len(tokens.data)}-token vocabulary")
    return str(tokens.contents(token_id))
