"""Mistral models' prompt as mistral-common encodes it: `MistralTokenizer.encode_chat_completion`.

A Mistral model's reference prompt is mistral-common's, built from its tokenizer file (`tekken.json`, or a
SentencePiece `tokenizer.model.v*`): vLLM uses it whenever a model folder holds one. `Tokenizer` holds one such file
and renders a chat template's variables with it: the canonical messages and tools become mistral-common's request
(each message through mistral-common's own `from_openai`), validated and encoded by mistral-common, and the tokens
are the prompt. Its text is the tokens decoded with the control tokens kept: a Tekken tokenizer's text as
mistral-common decodes it; a SentencePiece tokenizer's pieces with `▁` as a space and byte pieces as their bytes,
which is what mistral-common's generated Jinja templates write.

Validation is mistral-common's agnostic mode: every check a server makes but the one on the final message's role,
which the probes, rendering a finished assistant turn, need to pass. Its refusals are `InputError`s naming the
message (the first whose conversation so far mistral-common refuses) and the field.

mistral-common is an optional dependency (`chatcaps[mistral]`), imported only when a tokenizer is loaded.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from chatcaps.errors import InputError, SourceError

FOLDER_PATTERNS = ("tekken.json", "tokenizer.model.v*")
"""The files that make a model folder Mistral's (vLLM's `tokenizer_mode=auto`)."""
FILE_NAME = re.compile(r"tekken.*\.json|.*\.model\.v\d+\w*")
"""A Mistral tokenizer file by its name: Tekken's JSON, or SentencePiece's `.model.v<version>`."""
THINK = ("[THINK]", "[/THINK]")
ROLES = ("system", "developer", "user", "assistant", "tool")
"""The roles mistral-common's `convert_openai_messages` reads (a developer message as a system one)."""
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_FIELDS = {
    "InvalidToolMessageException": "tool_call_id",
    "InvalidFunctionCallException": "tool_calls",
    "InvalidToolException": "tools",
    "InvalidToolSchemaException": "tools",
    "InvalidMessageStructureException": "role",
    "InvalidRequestException": "role",
}
"""The message field each of mistral-common's refusals is about; "content" for the others."""
_REQUEST_FIELDS = {"InvalidRequestException": "reasoning_effort"}
"""The request's field a refusal no message causes is about; "tools" for the others (tools on v1, a tool's schema)."""
_EXTRA = "mistral-common: pip install 'chatcaps[mistral]'"


@cache
def shipped() -> Mapping[str, Path]:
    """The tokenizer files mistral-common's wheel ships, by version name: a SentencePiece file by its suffix ("v1",
    "v7m1"), a Tekken file by its stem ("tekken_240718"), and "tekken" for the newest. Found without importing it;
    empty where it is not installed."""
    spec = find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        return {}
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = sorted(path for path in data.iterdir() if FILE_NAME.fullmatch(path.name)) if data.is_dir() else []
    names = {path.name.rsplit(".model.", 1)[-1] if ".model." in path.name else path.stem: path for path in files}
    tekken = [path for path in files if path.suffix == ".json"]
    return names | ({"tekken": tekken[-1]} if tekken else {})


def in_folder(folder: Path) -> Path | None:
    """The Mistral tokenizer file a model folder holds (`tekken.json` first, then the `tokenizer.model.v*` of the
    highest version); None if none."""
    found = [
        path
        for pattern in FOLDER_PATTERNS
        for path in sorted(folder.glob(pattern), key=_version_number, reverse=True)
        if path.is_file()
    ]
    return next(iter(found), None)


def _version_number(path: Path) -> int:
    """The N of a `.model.vN...` file name (v11 after v3); 0 for any other."""
    found = re.search(r"\.v(\d+)", path.name)
    return int(found[1]) if found else 0


@dataclass(frozen=True)
class Tokenizer:
    """One Mistral tokenizer file, loaded: renders a chat template's variables to tokens and text."""

    path: Path
    digest: str
    """sha256 of the file: what its prompts depend on."""
    version: str
    thinking: bool
    """It has the `[THINK]` / `[/THINK]` control tokens: an assistant message's reasoning is written."""
    reasoning_efforts: tuple[str, ...]
    """The `reasoning_effort` values it takes (tokenizers v15 and later that set them); () where none."""
    bos_token: str
    eos_token: str
    _mistral: Any = field(repr=False, compare=False)

    def tokens(self, variables: Mapping[str, Any]) -> tuple[int, ...]:
        """mistral-common's tokens for the variables; `InputError` naming the message and field where it refuses."""
        request = self._request(variables)
        try:
            return tuple(self._mistral.encode_chat_completion(request).tokens)
        except Exception as error:  # mistral-common's refusals, pydantic's, a failed image download: all bad input
            raise self._refusal(request, error) from None

    def render(self, variables: Mapping[str, Any]) -> str:
        """The tokens' text, control tokens kept (see the module docstring)."""
        return self.text(self.tokens(variables))

    def text(self, tokens: Sequence[int]) -> str:
        """Tokens as text, control tokens kept: a Tekken tokenizer's own decoding; a SentencePiece tokenizer's pieces
        with `▁` as a space and byte pieces as the UTF-8 text they spell."""
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
        from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

        inner = self._mistral.instruct_tokenizer.tokenizer
        if not isinstance(inner, SentencePieceTokenizer):
            return str(inner.decode(list(tokens), special_token_policy=SpecialTokenPolicy.KEEP))
        parts: list[str] = []
        pending = bytearray()
        for token in tokens:
            piece = inner.id_to_piece(token)
            special = inner.is_special(token)
            byte = None if special else _BYTE_PIECE.fullmatch(piece)
            if byte is not None:
                pending.append(int(byte[1], 16))
                continue
            if pending:
                parts.append(pending.decode("utf-8", "replace"))
                pending.clear()
            parts.append(piece if special else piece.replace("▁", " "))
        if pending:
            parts.append(pending.decode("utf-8", "replace"))
        return "".join(parts)

    def _request(self, variables: Mapping[str, Any]) -> Any:
        """mistral-common's request for the variables: each message through its `from_openai`, the tools, the
        reasoning effort."""
        from mistral_common.protocol.instruct.converters import convert_openai_messages, convert_openai_tools
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        messages = []
        for index, message in enumerate(variables.get("messages") or ()):
            role = message.get("role") if isinstance(message, Mapping) else None
            if role not in ROLES:
                raise InputError(
                    f"unknown role {role!r}: mistral-common reads {', '.join(ROLES)}", index=index, field="role"
                )
            given = _openai(message, index)
            try:
                messages.extend(convert_openai_messages([given]))
            except Exception as error:  # pydantic's and mistral-common's refusals of a message's shape
                raise InputError(_said(error), index=index, field=_field(error)) from None
        tools = variables.get("tools")
        try:
            return ChatCompletionRequest(
                messages=messages,
                tools=None if tools is None else convert_openai_tools(list(tools)),
                reasoning_effort=variables.get("reasoning_effort"),
            )
        except Exception as error:
            raise InputError(_said(error), field=_field(error, "tools")) from None

    def _refusal(self, request: Any, error: Exception) -> InputError:
        """`error` as an `InputError` naming the first message whose conversation so far mistral-common refuses (none
        where every prefix passes: the tools or the request as a whole)."""
        from mistral_common.protocol.instruct.validator import ValidationMode, get_validator

        validator = get_validator(self._mistral.version, ValidationMode.agnostic)
        for end in range(1, len(request.messages) + 1):
            try:
                validator.validate_messages(request.messages[:end])
            except Exception:  # the first prefix it refuses ends with the message at fault
                return InputError(_said(error), index=end - 1, field=_field(error))
        return InputError(_said(error), field=_REQUEST_FIELDS.get(type(error).__name__, "tools"))


def file_digest(path: Path) -> str:
    """sha256 of the tokenizer file; `SourceError` where it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise SourceError(f"{path}: cannot read it: {error.strerror or error}") from error


def load(path: Path, digest: str) -> Tokenizer:
    """The tokenizer file at `path`, whose sha256 is `digest`; `SourceError` where mistral-common is missing or cannot
    read it."""
    try:
        from mistral_common.protocol.instruct.validator import ValidationMode
        from mistral_common.tokens.tokenizers.base import SpecialTokens
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    except ModuleNotFoundError as error:
        raise SourceError(f"{path}: reading a Mistral tokenizer needs {_EXTRA}") from error
    try:
        mistral = MistralTokenizer.from_file(path, mode=ValidationMode.agnostic)
    except Exception as error:  # a file mistral-common cannot read
        raise SourceError(f"{path}: not a Mistral tokenizer file mistral-common reads: {_said(error)}") from error
    inner = mistral.instruct_tokenizer.tokenizer
    thinking = all(inner.is_special(token.value) for token in (SpecialTokens.begin_think, SpecialTokens.end_think))
    builder = inner.model_settings_builder if mistral.version.supports_model_settings else None
    efforts = builder.reasoning_effort if builder is not None else None
    return Tokenizer(
        path=path,
        digest=digest,
        version=str(mistral.version.value),
        thinking=thinking,
        reasoning_efforts=tuple(str(value) for value in efforts.values) if efforts is not None else (),
        bos_token=inner.id_to_piece(inner.bos_id),
        eos_token=inner.id_to_piece(inner.eos_id),
        _mistral=mistral,
    )


def _openai(message: Any, index: int) -> Any:
    """A canonical message in the OpenAI shape mistral-common reads: an image block `{"type": "image", "url": ...}`
    as an `image_url` block; anything else as is. An image by a URL other than `data:` is refused: mistral-common
    would download it, and a render never reaches the network."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return message
    blocks = [_block(block, index) for block in content]
    return {**message, "content": blocks}


def _block(block: Any, index: int) -> Any:
    if not isinstance(block, Mapping):
        return block
    if block.get("type") == "image" and "url" in block:
        block = {"type": "image_url", "image_url": {"url": block["url"]}}
    image = block.get("image_url") if block.get("type") == "image_url" else None
    url = image.get("url") if isinstance(image, Mapping) else image
    if isinstance(url, str) and not url.startswith("data:"):
        raise InputError(
            f"an image by URL ({url[:40]}): mistral-common would download it; give it as a data: URL",
            index=index,
            field="content",
        )
    return block


def _said(error: Exception) -> str:
    """What mistral-common or pydantic said, on one line."""
    if isinstance(error, KeyError):
        return f"needs {error.args[0]!r}"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _field(error: Exception, default: str = "content") -> str:
    """The field a refusal is about: a missing key, pydantic's location, else by mistral-common's exception type."""
    if isinstance(error, KeyError):
        return str(error.args[0])
    errors = getattr(error, "errors", None)
    found: list[Mapping[str, Any]] = errors() if callable(errors) else []
    location = found[0].get("loc") or () if found else ()
    if location and isinstance(location[0], str) and location[0] != "messages":
        return location[0]
    return _FIELDS.get(type(error).__name__, default)
