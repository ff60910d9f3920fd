"""The words detection and rendering share: each defined here once, read by `probes/` and by the render side alike.

Detecting writes Caps and rendering reads them; both need the same names for what they talk about — the forms a
reasoning text takes and the field names behind them, the reasoning markers and the state a prompt leaves the model
in, the effort scale and the intent's tiers, the variables a template gets from the conversation, whether a control
moves the reasoning state — and a few text helpers. Nothing here renders or probes; `caps.py` imports from here, so
this module imports nothing of chatcaps: the two never form a circle.
"""

from __future__ import annotations

import json
import re
import reprlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

if TYPE_CHECKING:
    from collections.abc import Mapping

# Reasoning: the forms a message's reasoning can take, and the names it comes under.

FieldForm = Literal["reasoning_content", "reasoning", "thinking", "thought", "tool_plan"]
"""A message field holding the reasoning text."""
BlockForm = Literal["thinking_block", "thoughts_block"]
"""A content block holding it."""
ReasoningFormat = Literal[FieldForm, BlockForm, "inline", "none"]
"""Where a template reads reasoning from (`Caps.reasoning.format`)."""
FIELD_FORMS: tuple[FieldForm, ...] = get_args(FieldForm)
BLOCK_FORMS: Mapping[ReasoningFormat, tuple[str, str]] = MappingProxyType(
    {"thinking_block": ("thinking", "thinking"), "thoughts_block": ("thoughts", "text")}
)
"""Block forms: (block type, key holding the text)."""

REASONING_CONTENT = "reasoning_content"
"""The canonical field for a message's reasoning: what OpenAI-style servers (llama.cpp, vLLM) return and take back."""
REASONING_FIELDS = (REASONING_CONTENT, "reasoning", "thinking")
"""The canonical field for a message's reasoning, then the aliases clients send it under, in the order `normalise`
prefers them when several are set."""
REASONING_ALIASES = REASONING_FIELDS[1:]
TRANSFORMERS_REASONING_ORDER = (REASONING_FIELDS[0], *reversed(REASONING_ALIASES))
"""The same names in the order transformers looks for a set one (it fills `reasoning_content` and `thinking` from the
first it finds)."""
REASONING_KEYS = frozenset(REASONING_FIELDS)

State = Literal["forced_open", "closed", "free", "none"]
"""The reasoning state a generation prompt leaves the model in: inside an opened block, past a closed one, free to
open one, or with no reasoning."""


@dataclass(frozen=True)
class Markers:
    """The text a template writes around reasoning; either may be unknown."""

    start: str | None = None
    end: str | None = None

    def __bool__(self) -> bool:
        return bool(self.start or self.end)


def state_of(output: str | None, markers: Markers) -> State:
    """The reasoning state a render ending in the generation prompt leaves the model in."""
    if output is None or not markers:
        return "none"
    tail = output.rstrip()
    if markers.start and tail.endswith(markers.start):
        return "forced_open"
    if markers.end and tail.endswith(markers.end):
        return "closed"  # an empty block, or a lone closing tag: either way the model starts with the answer
    return "free"


class _Effect(Protocol):
    @property
    def state(self) -> State: ...


class _Control(Protocol):
    """What `moves_state` reads of a `chatcaps.caps.Control`, named by its shape: caps imports from here."""

    @property
    def effect(self) -> Mapping[str, _Effect]: ...


def moves_state(control: _Control) -> bool:
    """Whether the control's values leave the generation prompt in different reasoning states (a real switch, not
    one that only changes text or history)."""
    return len({effect.state for effect in control.effect.values()}) > 1


# Effort: chatcaps' scale of effort words and the tiers the reasoning intent speaks.

EFFORT_LEVELS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""chatcaps' own scale of effort words, least to most: a compared constant on it (other than "none", which many
non-reasoning options use too) marks an effort candidate and orders its values."""
Tier = Literal["low", "medium", "high"]
TIERS: tuple[Tier, ...] = get_args(Tier)
"""The effort tiers of the reasoning intent, least to most (all of them on the effort scale)."""
Intent = Literal["off", "on", Tier] | int | None
"""The reasoning a request asks for: off, on, a tier, a token budget, or None (the template's default)."""
TIER_BUDGETS: Mapping[str, int] = MappingProxyType({"low": 2048, "medium": 8192, "high": 32768})
"""The one table for tier <-> token budget."""

# Template variables.

CONVERSATION_VARIABLES = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
"""Variables a render takes from the conversation: template kwargs may not set them (transformers refuses them)."""
RESERVED_ARGS = CONVERSATION_VARIABLES | {"continue_final_message"}
"""Names `ChatTemplate.render` takes as its own arguments, so `template_args` may not set them."""
STANDARD_VARIABLES = RESERVED_ARGS | {
    "bos_token",
    "eos_token",
    "raise_exception",
    "strftime_now",
    "namespace",
    "dict",
    "range",
    "lipsum",
    "cycler",
    "joiner",
    "true",
    "false",
    "none",
    "True",
    "False",
    "None",
}
"""Every name a template gets without being asked: never a template argument of its own."""

# Text.


def common_prefix_length(one: str, other: str) -> int:
    """Found by halving: comparing two slices is one C call, where a loop over characters costs one step each."""
    low, high = 0, min(len(one), len(other))
    while low < high:
        middle = (low + high + 1) // 2
        if one[:middle] == other[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def suffix_after_common(base: str, longer: str) -> str:
    """What `longer` adds after the longest prefix it shares with `base`."""
    return longer[common_prefix_length(base, longer) :]


def added_after(base: str, longer: str) -> str:
    """What `longer` adds after the longest prefix it shares with `base`, backed off to the start of a tag that prefix
    cuts (`<|end_of_text|>` against `<|start_header_id|>` share `<|`): what a template adds is whole tags."""
    at = common_prefix_length(base, longer)
    opening = longer.rfind("<", 0, at)
    if opening >= 0 and opening > longer.rfind(">", 0, at) and re.match(r"<[^<>\s]*\Z", longer[opening:at]):
        at = opening
    return longer[at:]


PLACEHOLDER = re.compile(r"\$\{(\w+)\}")
"""A hole in a `CallFormat` text: `${name}`, `${arguments}`, `${id}`, `${index}`, `${key}`, `${value}`."""


def placeholder_pattern(text: str, holes: Mapping[str, str]) -> str:
    """A regex for `text` with its placeholders filled by `holes` (a pattern each): the literal text escaped, each
    whitespace run in it, and the place between two adjacent tags, any whitespace (models space tags their own way),
    and a quoted attribute value after `=` any quoted text (`string="true"` beside `string="false"`: a value's type
    written into its tag). A hole written twice (`<${key}>${value}</${key}>`) matches the same text again."""
    out, seen = [], set()
    for at, part in enumerate(PLACEHOLDER.split(text)):
        if at % 2:
            repeated = part in seen and f"(?P<{part}>" in holes[part]
            out.append(f"(?P={part})" if repeated else holes[part])
            seen.add(part)
            continue
        for piece in re.split(r"(\s+|=\"[^\"$]*\")", part):
            if piece.isspace():
                out.append(r"\s*")
            elif piece.startswith('="'):
                out.append(r'="[^"]*"')
            elif piece:
                out.append(re.escape(piece).replace("><", r">\s*<"))
    return "".join(out)


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 60, 60


def shown(value: Any) -> str:
    """`repr(value)` cut short for an error message: a hostile value can be huge or nested past the recursion
    limit, where the full repr would raise RecursionError instead of the error being reported."""
    try:
        return _SHOWN.repr(value)
    except Exception:  # an int past Python's 4300-digit str limit, an object whose repr raises
        return f"<{type(value).__name__}>"


def read_quoted(text: str, quote: str, at: int = 0) -> tuple[Any, int]:
    """One value written in a call syntax with a quoting token of its own (gemma-4's `{city:<|"|>London<|"|>,n:2}`):
    a string between two `quote` tokens, taken as it is; an object of unquoted keys, `key:value` joined by commas, in
    braces; a list in brackets; a number, `true`, `false`, `null` or `None`. Returns the value and where it ends;
    raises ValueError where the text is no such value, nested past Python's recursion limit included (a model's or a
    template's text, read by the reply side and the probes, must not end either in RecursionError)."""
    try:
        return _read_quoted(text, quote, at)
    except RecursionError:
        raise ValueError(f"a value nested too deep at {at}") from None


def _read_quoted(text: str, quote: str, at: int) -> tuple[Any, int]:
    if text.startswith(quote, at):
        end = text.find(quote, at + len(quote))
        if end < 0:
            raise ValueError(f"an unclosed string at {at}")
        return text[at + len(quote) : end], end + len(quote)
    if text.startswith("{", at):
        found: dict[str, Any] = {}
        at += 1
        while not text.startswith("}", at):
            colon = text.find(":", at)
            if colon < 0 or not text[at:colon].strip():
                raise ValueError(f"no key at {at}")
            found[text[at:colon].strip()], at = _read_quoted(text, quote, colon + 1)
            at = _after_item(text, at, "}")
        return found, at + 1
    if text.startswith("[", at):
        items: list[Any] = []
        at += 1
        while not text.startswith("]", at):
            item, at = _read_quoted(text, quote, at)
            items.append(item)
            at = _after_item(text, at, "]")
        return items, at + 1
    word = re.match(r"\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|None)", text[at:])
    if word is None:
        raise ValueError(f"no value at {at}")
    literal = word.group(1)
    return (None if literal == "None" else json.loads(literal)), at + word.end()


def _after_item(text: str, at: int, closer: str) -> int:
    """Past the comma after an item, or at the closer; ValueError for anything else."""
    while at < len(text) and text[at].isspace():
        at += 1
    if text.startswith(",", at):
        return at + 1
    if text.startswith(closer, at):
        return at
    raise ValueError(f"no {closer!r} or ',' at {at}")
