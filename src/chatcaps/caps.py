"""`Caps`: what a chat template can render and how, as found by `detect_caps` — the dataclasses and their JSON form.

Every field is decided by rendering probe conversations; nothing here computes, except `call_shape`, the rule the
probes decide a call format's shape by, and what `from_json` fills in for data written before a field existed.
`to_json` is deterministic (orjson, sorted keys): the same template gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import orjson

from chatcaps.engines.base import EngineName
from chatcaps.vocab import PLACEHOLDER, ReasoningFormat
from chatcaps.vocab import State as State  # the schema's field type, defined with the words that decide it

SCHEMA_VERSION = 2

JSON = str | int | float | bool | None
History = Literal["all", "tool_calls", "after_last_user", "last_assistant", "none"]
"""Which past assistant turns keep their reasoning: every one; tool-call turns only (before the last user turn too);
those after the last user turn; the last one; none."""
ControlKind = Literal["bool", "enum", "int", "system_flag"]
ControlRole = Literal["toggle", "effort", "budget", "history"]
ArgumentShape = Literal["object", "string", "both"]
FlagTurn = Literal["system", "user"]
ArgumentsForm = Literal["json", "json_string", "parameters", "python", "quoted"]
CallShape = Literal["list", "keyed", "lines", "object", "named"]
"""How a reply's calls are read (docs/reply.md): one JSON or Python list (`list`), a list of `{"NAME": {...}}`
(`keyed`), one Python call a line (`lines`), one JSON object a call (`object`), the name written before the arguments
(`named`)."""
KEYED_CALL = '{"${name}": ${arguments}}'


@dataclass(frozen=True)
class Roles:
    system: bool = False
    """A leading system message's text renders."""
    system_inline: bool = False
    """A system message after position 0 renders."""
    developer: bool = False
    """A developer message's text renders."""
    requires_alternation: bool = False
    """user,user or assistant,assistant raises or loses text."""


@dataclass(frozen=True)
class Content:
    string: bool = False
    typed: bool = False
    """`[{"type": "text"}]` blocks render their text with no Python or JSON repr leaking."""
    requires_typed: bool = False
    typed_assistant: bool = True
    """An assistant turn's text blocks render too (a template may read a user turn's blocks and print an assistant
    turn's list as it is); True in Caps written before it was probed."""
    requires_non_null: bool = False
    """An assistant tool-call turn with content None fails or prints "None"."""
    block_types: tuple[str, ...] = ()
    """Non-text block types that render something (image, video, audio)."""


@dataclass(frozen=True)
class CallFormat:
    """How an assistant turn writes its tool calls, as rendered: literal text with `${...}` placeholders.

    A turn's calls are `begin`, then each call's `call` joined by `separator`, then `end`. In `call`, `${name}` is the
    function's name, `${arguments}` its arguments written in the `arguments` form and `${id}` the call id (absent
    where the template writes none), `${index}` its position in the list.
    """

    begin: str
    call: str
    separator: str | None
    """None where the template renders one call per turn (two raise)."""
    end: str
    arguments: ArgumentsForm
    """"json": a JSON object; "json_string": that object as a JSON string; "python": `key=value` keyword arguments
    (Python literals); "parameters": one `parameter` per argument; "quoted": an object of unquoted keys whose strings
    sit between a quoting token of the template's own (gemma-4's `{city:<|"|>London<|"|>}`, `vocab.read_quoted`),
    `parameter` one string argument as written (`${key}:<|"|>${value}<|"|>`: the token is what follows the value)."""
    parameter: str | None = None
    """One argument in the "parameters" form, with `${key}` and `${value}` (a string as is, other values as JSON)."""
    keys: Mapping[str, str] | None = None
    """Where `call` is one JSON object: the keys that hold "name", "arguments" and (if written) "id"."""
    first_index: int = 0
    """`${index}` in `call` is the call's position in the list, counted from this (0 or 1)."""
    exact_values: bool = False
    """Numbers, booleans, null, nested objects and arrays, and strings with quotes, backslashes, newlines and
    non-ASCII text, render so that reading the arguments back gives the same values."""
    alternative_openers: tuple[str, ...] = ()
    """Text the template writes right before a call where a template variable says so, and a model may write
    before any call (Llama 3.1's `<|python_tag|>`, written where `builtin_tools` holds the call's name): found by
    rendering the call with each list-valued variable holding its name; a reply may have it before a call."""
    alternative_turn_ends: tuple[str, ...] = ()
    """Text the template ends a turn with instead of the end of turn in those renders (Llama 3.1's `<|eom_id|>`):
    a reply may end with it too."""
    shape: CallShape | None = None
    """How a reply's calls are read (`call_shape`, decided where the format is found); None where the format fits no
    shape: its calls are then not read."""

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CallFormat:
        """A call format from its JSON data; data from before the alternative openers and turn ends has none, and data
        from before the shape gets it by the rule the probes decide it by."""
        lists = {key: tuple(raw.get(key, ())) for key in ("alternative_openers", "alternative_turn_ends")}
        found = cls(**{**raw, **lists})
        return found if "shape" in raw else replace(found, shape=call_shape(found))


def call_shape(calls: CallFormat) -> CallShape | None:
    """The shape `calls` takes, from its texts, or None where it fits none: a list needs its brackets and a comma
    between calls, a keyed list calls that are `{"NAME": ARGUMENTS}`, Python lines a call a line inside opening and
    closing text, an object the keys of one JSON object, a named call its name before arguments that end the call
    (a JSON closing bracket right after JSON arguments cannot tell where they end)."""
    call, begin, end = calls.call, calls.begin.rstrip(), calls.end.lstrip()
    listed = begin.endswith("[") and end.startswith("]") and (calls.separator or "").strip() == ","
    python_call = calls.arguments == "python" and call.strip() == "${name}(${arguments})"
    if listed and (calls.keys or python_call):
        return "list"
    if listed and calls.arguments == "json" and call.strip() == KEYED_CALL:
        return "keyed"
    if python_call and call.endswith("\n") and not calls.separator and calls.begin.strip() and calls.end.strip():
        return "lines"
    if calls.keys and calls.arguments in ("json", "json_string"):
        return "object"
    holes = [match.group(1) for match in PLACEHOLDER.finditer(call)]
    after = call.split("${arguments}")[-1].lstrip()
    json_closer = calls.arguments != "parameters" and after[:1] in ("}", "]")
    if calls.arguments != "python" and holes[-1:] == ["arguments"] and "name" in holes and not json_closer:
        return "named"
    return None


@dataclass(frozen=True)
class Tools:
    definitions: bool = False
    calls: bool = False
    parallel_calls: bool = False
    responses: bool = False
    call_id: bool = False
    arguments: ArgumentShape | None = None
    """Argument shapes that render correctly: a JSON object, a JSON string, or either."""
    requires_list: bool = False
    """`tools=None` raises where `tools=[]` renders: the template iterates tools even when there are none."""
    short_call_ids: bool = False
    """An OpenAI-style call id ("call_" and 20 characters) fails where a 9-character alphanumeric one renders."""
    call_format: CallFormat | None = None
    """How the template writes an assistant turn's calls; None where the renders show no consistent form."""
    calls_need_null_content: bool = False
    """A tool-call turn writes its calls only where its content is None (`message['content'] is none`): the render
    side sends such a turn's empty content as None."""


@dataclass(frozen=True)
class Effect:
    """What one value of a control does to the generation prompt and to past reasoning."""

    state: State
    history: History
    format: ReasoningFormat | None = None
    """The field or block past reasoning is read from under this value, where the template reads none or another
    by default (a template that reads past reasoning only with thinking on); None: `Reasoning.format`."""


@dataclass(frozen=True)
class Control:
    """A template variable (or a flag in the system text) that changes reasoning behaviour."""

    name: str
    kind: ControlKind
    values: tuple[JSON, ...]
    """Values tried whose renders differ from each other, in order from least to most reasoning where known."""
    default: JSON
    """The value whose render equals the render with nothing passed (None when no value does)."""
    effect: Mapping[str, Effect]
    """Keyed by the value as JSON text (`"true"`, `"\\"high\\""`, `"1024"`)."""
    role: ControlRole
    strips_flag: bool = False
    """A `system_flag` the template cuts out of the text it prints: the model never reads the flag itself."""
    flag_turn: FlagTurn = "system"
    """Where a `system_flag` acts: the system turn (the last user turn where the template has no system role), or
    the last user turn where only there."""
    whole_text: bool = False
    """A `system_flag` the template compares with the whole text of its turn (`content == "detailed thinking on"`): it
    acts only as that turn's entire text, never appended to other text."""
    without_system: bool = False
    """The control acts only in a conversation with no system turn (it rewrites the template's default system
    prompt): a request that brings its own system message gets none of its effect."""
    held: dict[str, JSON] = field(default_factory=dict)
    """Other controls' values every render of this one had (an effort level the template reads only with thinking
    on): its effects show only while they hold; empty where it acts on its own."""
    declared: bool = False
    """A parameter of a prompt encoder (`chatcaps.encoders`), declared by it: its effects were rendered, its being a
    control is the encoder's word, not something the probes read off a template."""


@dataclass(frozen=True)
class Reasoning:
    format: ReasoningFormat = "none"
    requires_tools: bool = False
    with_content: bool = False
    without_content: bool = False
    start_marker: str | None = None
    end_marker: str | None = None
    end_marker_inferred: bool = False
    """No render shows the end marker: it is the start marker's closing counterpart (a generation prompt that opens
    `<think>` in a template that never closes it), so a reply parser may meet another."""
    content_headers: tuple[str, ...] = ()
    """Where reasoning is one channel among several (Harmony's `<|channel|>analysis<|message|>...<|end|>`), the end
    marker is the channel's end, what an answer and a tool call both write after the reasoning, and the text that
    opens the answer's own channel after it (`<|start|>assistant<|channel|>final<|message|>`) is a content header:
    grammar, never content. Also an answer's one-tag header or wrapper, after the end marker (`<|START_TEXT|>`) or
    after the turn's opening (`<|START_RESPONSE|>`, with or without reasoning). Empty where the end marker runs
    straight into the answer."""
    history: History = "none"
    strips_inline: bool = False
    controls: tuple[Control, ...] = ()
    default_state: State = "none"
    channel_style: bool = False
    """Reasoning is one channel among several, each channel a message of its own opened as the generation prompt
    opens one (Harmony): the end marker is the channel's end, and every content header starts with the generation
    prompt. A reply may then hold several messages: reasoning again after an answer, a call as a message of its own."""


@dataclass(frozen=True)
class ProbeError:
    probe: str
    error: str


@dataclass(frozen=True)
class Caps:
    """Everything `detect_caps` found out about one template on one engine."""

    template_sha256: str
    engine: EngineName
    roles: Roles = field(default_factory=Roles)
    content: Content = field(default_factory=Content)
    tools: Tools = field(default_factory=Tools)
    reasoning: Reasoning = field(default_factory=Reasoning)
    generation_prompt: str = ""
    end_of_turn: str | None = None
    """What the template writes after an assistant message's content (`<|im_end|>`, `<|eot_id|>`, eos), less layout
    whitespace: the turn's own end, not a generation prompt or text the template writes after the conversation;
    None where it writes nothing."""
    emits_bos: bool = False
    template_variables: tuple[str, ...] = ()
    probe_errors: tuple[ProbeError, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; tuples become lists, control effects plain dicts."""
        return orjson.loads(self.to_json())  # type: ignore[no-any-return]

    def to_json(self) -> bytes:
        """Deterministic JSON: orjson with sorted keys, so equal Caps give equal bytes."""
        return orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Caps:
        """Rebuild Caps from `to_json` output (or its parsed dict); rejects another schema version.

        Version 1 is not upgraded: it lacks the tool-call format and the end of turn, which only rendering finds, and
        reading it as "none found" would make the reply side miss calls; the caches are keyed by the probe code, so
        old entries are never read."""
        raw: Mapping[str, Any] = orjson.loads(data) if isinstance(data, str | bytes) else data
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"Caps schema_version {version!r} is not {SCHEMA_VERSION}; detect the caps again")
        reasoning = dict(raw["reasoning"])
        reasoning["content_headers"] = tuple(reasoning.get("content_headers", ()))
        if "channel_style" not in reasoning:  # data from before the field: by the rule the probes decide it by
            reasoning["channel_style"] = _channel_style(raw["generation_prompt"], reasoning)
        reasoning["controls"] = tuple(
            Control(
                name=control["name"],
                kind=control["kind"],
                values=tuple(control["values"]),
                default=control["default"],
                effect={value: Effect(**effect) for value, effect in control["effect"].items()},
                role=control["role"],
                strips_flag=control.get("strips_flag", False),
                flag_turn=control.get("flag_turn", "system"),
                whole_text=control.get("whole_text", False),
                without_system=control.get("without_system", False),
                held=dict(control.get("held", {})),
                declared=control.get("declared", False),
            )
            for control in reasoning["controls"]
        )
        content = dict(raw["content"])
        content["block_types"] = tuple(content["block_types"])
        return cls(
            template_sha256=raw["template_sha256"],
            engine=raw["engine"],
            roles=Roles(**raw["roles"]),
            content=Content(**content),
            tools=Tools(**{**raw["tools"], "call_format": _call_format(raw["tools"]["call_format"])}),
            reasoning=Reasoning(**reasoning),
            generation_prompt=raw["generation_prompt"],
            end_of_turn=raw["end_of_turn"],
            emits_bos=raw["emits_bos"],
            template_variables=tuple(raw["template_variables"]),
            probe_errors=tuple(ProbeError(**error) for error in raw["probe_errors"]),
            schema_version=version,
        )


def _call_format(raw: Mapping[str, Any] | None) -> CallFormat | None:
    return None if raw is None else CallFormat.from_dict(raw)


def _channel_style(prompt: str, reasoning: Mapping[str, Any]) -> bool:
    """For data from before `Reasoning.channel_style`: an end marker, and content headers that all open with the
    generation prompt (which the probes cut off the end marker where they find each channel a message of its own)."""
    opening, headers = prompt.strip(), reasoning["content_headers"]
    return bool(reasoning["end_marker"] and headers and opening and all(h.startswith(opening) for h in headers))
