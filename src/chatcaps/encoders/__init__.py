"""Encoders: models whose prompt is defined by Python code instead of a chat template, behind the `Renderer` protocol.

An `Encoder` renders a conversation (the variables a chat template gets: `messages`, `tools`, `add_generation_prompt`
and its own parameters) to text, and declares what rendering cannot find: the parameters it reads, which `Caps`
marks as declared (`Control.declared`), and the text that stands for its source. That text is a Jinja declaration
of what the encoder reads (never rendered): the probes' candidate reader proposes from it as from a template, and its
sha256 — which covers a digest of the encoder's code — keys the Caps caches.

`EncoderRenderer` is an engine-like renderer (the base layer, beside `chatcaps.engines`): the probes, `detect_caps`
and `ChatTemplate` use it as they use a compiled template.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatcaps.encoders import deepseek_v32, mistral
from chatcaps.engines.base import DEFAULT_LIMITS, EngineName, Limits
from chatcaps.errors import InputError, RenderLimitError

if TYPE_CHECKING:
    from jinja2.nodes import Template

    from chatcaps.caps import Caps

__all__ = ["ENCODERS", "Encoder", "EncoderRenderer", "declared", "encoder", "from_mistral", "in_folder", "names"]


@dataclass(frozen=True)
class Encoder:
    """One model family's prompt encoder."""

    name: str
    render: Callable[[Mapping[str, Any]], str] = field(repr=False)
    """The prompt for a chat template's variables (plain JSON data); bad input raises `InputError`."""
    parameters: Mapping[str, tuple[Any, ...]]
    """The variables it reads besides the conversation, with the values each takes: declared controls."""
    message_fields: tuple[str, ...]
    """The message fields it reads."""
    literals: tuple[str, ...]
    """Markers it writes (reasoning's), proposed to the probes as a template's string constants are."""
    folder_file: str
    """The file in a model folder that says this encoder defines the model's prompt."""
    bos_token: str
    eos_token: str
    code: Path = field(repr=False)
    """The module that holds its code: its digest is part of `declaration`."""
    data_digest: str = ""
    """The digest of the data its prompts also depend on (a Mistral tokenizer file's sha256), part of `declaration`."""
    tokens: Callable[[Mapping[str, Any]], tuple[int, ...]] | None = field(default=None, repr=False)
    """The prompt's token ids for the same variables, where the encoder is token-native (Mistral's); else None."""

    @cached_property
    def declaration(self) -> str:
        """A Jinja text naming what it reads (see the module docstring)."""
        return _declaration(self)


def _deepseek_v32(variables: Mapping[str, Any]) -> str:
    """DeepSeek-V3.2 as servers map a request onto it: request tools in a new system message at index 0, thinking
    mode where `thinking` is true."""
    return deepseek_v32.encode(
        variables.get("messages") or (),
        thinking=bool(variables.get("thinking")),
        tools=variables.get("tools"),
        generation_prompt=bool(variables.get("add_generation_prompt")),
    )


ENCODERS: Mapping[str, Encoder] = {
    "deepseek-v3.2": Encoder(
        name="deepseek-v3.2",
        render=_deepseek_v32,
        parameters={"thinking": (False, True)},
        message_fields=("content", "reasoning_content", "tool_calls"),
        literals=(deepseek_v32.THINK_START, deepseek_v32.THINK_END),
        folder_file="encoding/encoding_dsv32.py",
        bos_token=deepseek_v32.BOS,
        eos_token=deepseek_v32.EOS,
        code=Path(deepseek_v32.__file__),
    )
}
"""Every encoder by name."""


_MISTRAL = "mistral-"
"""The prefix of the names of mistral-common's shipped tokenizers as encoders ("mistral-v3", "mistral-tekken")."""
_LOADED: dict[tuple[str, str], Encoder] = {}
"""Mistral encoders by name (the tokenizer file's path, or "mistral-<version>") and the file's digest, each loaded once:
`compile_encoder` finds them by declaration."""
_LOADING = threading.Lock()


def names() -> tuple[str, ...]:
    """Every encoder's name: those of `ENCODERS`, and mistral-common's shipped tokenizers where it is installed."""
    return (*sorted(ENCODERS), *(_MISTRAL + version for version in sorted(mistral.shipped())))


def encoder(name: str) -> Encoder:
    """The encoder named `name` (see `names`); `InputError` listing the names where there is none."""
    found = ENCODERS.get(name)
    if found is not None:
        return found
    shipped = mistral.shipped().get(name.removeprefix(_MISTRAL)) if name.startswith(_MISTRAL) else None
    if shipped is None:
        raise InputError(f"unknown encoder {name!r}; the encoders are {list(names())}")
    return from_mistral(shipped, name=name)


def from_mistral(path_or_version: str | os.PathLike[str], *, name: str | None = None) -> Encoder:
    """The encoder of a Mistral tokenizer file (`tekken.json`, `tokenizer.model.v*`), or of one mistral-common ships
    given by its version name ("v3", "tekken": `mistral.shipped`); loaded once per file content. `SourceError`
    where mistral-common is missing or cannot read the file."""
    path = mistral.shipped().get(os.fspath(path_or_version)) or Path(path_or_version)
    digest = mistral.file_digest(path)
    key = (name or str(path), digest)
    with _LOADING:
        found = _LOADED.get(key)
        if found is None:
            found = _LOADED[key] = _mistral_encoder(mistral.load(path, digest), key[0])
    return found


def _mistral_encoder(tokenizer: mistral.Tokenizer, name: str) -> Encoder:
    """A Mistral tokenizer as an encoder: `reasoning_effort` declared where it takes one, reasoning read (and the
    `[THINK]` markers proposed) where it has thinking."""
    return Encoder(
        name=name,
        render=tokenizer.render,
        parameters={"reasoning_effort": tokenizer.reasoning_efforts} if tokenizer.reasoning_efforts else {},
        message_fields=(
            "content",
            "tool_calls",
            "tool_call_id",
            *(("reasoning_content",) if tokenizer.thinking else ()),
        ),
        literals=mistral.THINK if tokenizer.thinking else (),
        folder_file=tokenizer.path.name,
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        code=Path(mistral.__file__),
        data_digest=tokenizer.digest,
        tokens=tokenizer.tokens,
    )


def in_folder(folder: Path) -> Encoder | None:
    """The encoder whose file the model folder holds (DeepSeek-V3.2's `encoding/encoding_dsv32.py`, a Mistral
    `tekken.json` or `tokenizer.model.v*`); None if none."""
    found = next((found for found in ENCODERS.values() if (folder / found.folder_file).is_file()), None)
    if found is not None:
        return found
    tokenizer = mistral.in_folder(folder)
    return None if tokenizer is None else from_mistral(tokenizer)


def _declaration(found: Encoder) -> str:
    digest = hashlib.sha256(found.code.read_bytes()).hexdigest()[:16]
    data = f", data {found.data_digest[:16]}" if found.data_digest else ""
    fields = "".join(f"{{{{ message.{name} }}}}" for name in found.message_fields)
    tests = "".join(
        f"{{% if {name} is sameas {_jinja(value)} %}}{{% endif %}}"
        for name, values in found.parameters.items()
        for value in values
    )
    literals = "".join(f"{{{{ {_jinja(literal)} }}}}" for literal in found.literals)
    return (
        f"{{#- chatcaps encoder {found.name} (code {digest}{data}): what it reads, for the probes; never rendered"
        " -#}\n"
        f"{{%- for message in messages %}}{fields}{{% endfor %}}{tests}{literals}\n"
    )


def _jinja(value: Any) -> str:
    """A JSON constant as Jinja writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


@cache
def _by_declaration() -> Mapping[str, Encoder]:
    return {found.declaration: found for found in ENCODERS.values()}


def compile_encoder(declaration: str, *, name: str, limits: Limits = DEFAULT_LIMITS) -> EncoderRenderer:
    """The renderer of the encoder whose `declaration` this is (what `sources.from_encoder` gives as the text): one
    of `ENCODERS`, or a Mistral tokenizer loaded in this process."""
    found = _by_declaration().get(declaration)
    if found is None:
        with _LOADING:
            found = next((loaded for loaded in _LOADED.values() if loaded.declaration == declaration), None)
    if found is None:
        raise InputError(f"{name}: not an encoder's declaration; the encoders are {sorted(ENCODERS)}")
    return EncoderRenderer(found, name=name, limits=limits)


class EncoderRenderer:
    """An encoder as a `Renderer`: `render` runs it on the variables, its `source` is its declaration."""

    engine: EngineName = "encoder"

    def __init__(self, found: Encoder, *, name: str, limits: Limits = DEFAULT_LIMITS) -> None:
        self.encoder = found
        self.name = name
        self.source = found.declaration
        self.limits = limits

    def render(self, variables: Mapping[str, Any]) -> str:
        """The encoder's prompt, held to `limits.max_output_chars` (its work is linear in its input: no other limit
        applies)."""
        prompt = self.encoder.render(variables)
        if len(prompt) > self.limits.max_output_chars:
            raise RenderLimitError(
                f"the prompt is longer than {self.limits.max_output_chars} characters",
                limit="max_output_chars",
                template_name=self.name,
            )
        return prompt

    def tokens(self, variables: Mapping[str, Any]) -> tuple[int, ...]:
        """The prompt's token ids for `variables`, where the encoder is token-native; `InputError` where it is not."""
        if self.encoder.tokens is None:
            raise InputError(f"the {self.encoder.name} encoder writes text, not tokens")
        return self.encoder.tokens(variables)

    def undeclared_variables(self) -> frozenset[str]:
        return frozenset(self.encoder.parameters)

    def source_tree(self) -> Template | None:
        return None


def declared(caps: Caps, found: Encoder) -> Caps:
    """`caps` with the controls the encoder's parameters declare marked so (`Control.declared`)."""
    reasoning = caps.reasoning
    controls = tuple(
        replace(control, declared=True) if control.name in found.parameters else control
        for control in reasoning.controls
    )
    return replace(caps, reasoning=replace(reasoning, controls=controls))
