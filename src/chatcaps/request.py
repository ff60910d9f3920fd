"""The canonical chat request: what each wire's reader (`chatcaps.wire.openai`, `chatcaps.wire.anthropic`) makes of a
client's body, and all that the hook and `chatcaps serve` read after it.

Frozen dataclasses of plain values, in no API's words but where a value is passed on as it is: `messages` and `tools`
are canonical input (docs/polyfills.md), `ToolChoice.value` and `answer_format` are in the spelling the grammar
(`chatcaps.reply.constraint`) and a template's own `tool_choice` variable read. What a client's API names a field is
kept for what the server says back: `Origins` maps an error about a canonical message onto the client's own
message (or field), and `Words` holds the client's names for the notes and refusals the server writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatcaps.errors import InputError
from chatcaps.vocab import Intent


@dataclass(frozen=True)
class Sampling:
    """How to generate, as the request asks: None where it leaves a field to the backend."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    llama_cpp: Mapping[str, Any] = field(default_factory=dict)
    """llama-server's own sampling fields the request set, as given (`chatcaps.wire.fields.LLAMA_CPP_FIELDS`)."""
    constrained: tuple[str, ...] = ()
    """The fields the request sets that only a grammar can honour (`response_format`): a backend that applies no
    grammar refuses them by name."""

    def given(self) -> tuple[str, ...]:
        """The fields the request set (a backend refuses those it cannot honour)."""
        named = tuple(name for name in _NAMED if getattr(self, name) not in (None, ()))
        return named + tuple(self.llama_cpp) + self.constrained


_NAMED = ("max_tokens", "temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")


@dataclass(frozen=True)
class ToolChoice:
    """Which calls the request allows: `value` in OpenAI's spelling ("auto", "none", "required", or
    `{"type": "function", "function": {"name": ...}}`), as the grammar and a template's `tool_choice` variable read
    it; `spelled`, the client's own words for it, for a refusal."""

    value: Any
    spelled: str

    @property
    def free(self) -> bool:
        """It asks for nothing a model does not do with tools anyway ("auto")."""
        return bool(self.value == "auto")


@dataclass(frozen=True)
class Signed:
    """A reasoning block a client sent back with the signature this server gave it: where it stood, as the client
    numbers it (`messages[2].content[0]`), its text and the signature."""

    where: str
    text: str
    signature: str


@dataclass(frozen=True)
class Words:
    """The client's API's names for what the server may write back about the request."""

    auto: str = '"auto"'
    """"auto" as the client sends it, in a refusal that suggests it."""
    parallel: str = "parallel_tool_calls"
    """The field that turns parallel calls off, in a note that it was not held."""


@dataclass(frozen=True)
class Origins:
    """Where each canonical message came from in the client's body: its message index there, or the name of the
    top-level field it was read from (`system`). Without origins, canonical messages are the client's own."""

    of: tuple[int | str, ...]

    def located(self, error: InputError) -> InputError:
        """`error` about canonical message `error.index`, about the client's message (or field) it came from."""
        if error.index is None or error.index >= len(self.of):
            return error
        where = f"messages[{error.index}]" + (f".{error.field}" if error.field else "") + ": "
        text = str(error).removeprefix(where)
        origin = self.of[error.index]
        if isinstance(origin, str):
            return InputError(f"request.{origin}: {text}", field=origin)
        return InputError(text, index=origin, field=error.field)


@dataclass(frozen=True)
class ChatRequest:
    """One chat request, read from any API's body."""

    messages: Sequence[Mapping[str, Any]]
    """Canonical messages (checked by the render)."""
    tools: Sequence[Mapping[str, Any]] | None = None
    """OpenAI-style function tools (checked by the render); None or empty where none are rendered."""
    tool_choice: ToolChoice | None = None
    """None where the request names none."""
    parallel_calls: bool = True
    answer_format: Mapping[str, Any] | None = None
    """The JSON the answer must be, in OpenAI's `response_format` spelling; None for free text."""
    reasoning: Intent = None
    template_args: Mapping[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    sampling: Sampling = field(default_factory=Sampling)
    stream: bool = False
    include_usage: bool = False
    """A streamed answer ends with the token counts (OpenAI's `stream_options.include_usage`)."""
    raw: bool = False
    """The reasoning stays in the content as generated, markers included (llama-server's `reasoning_format:
    "none"`); tool calls are still read."""
    notes: tuple[str, ...] = ()
    """What was read approximately or left out, in the client's words: the report's warnings."""
    signed: tuple[Signed, ...] = ()
    origins: Origins | None = None
    words: Words = field(default_factory=Words)

    @property
    def has_tools(self) -> bool:
        """It renders tools (the backend may pick a tool-use template)."""
        return bool(self.tools)

    def located(self, error: InputError) -> InputError:
        """`error` as the client's body locates it (`Origins.located`); as it is without origins."""
        return error if self.origins is None else self.origins.located(error)
