"""Tool calls in the reply grammar: `Caps.tools.call_format` as a transformers `tool_calls` field, and that field's
values read into calls (`read_region`); a format's holes are `reply/holes.py`'s, the parameters form and a value's
typing `reply/parameters.py`'s and `reply/values.py`'s.

A format takes one of five shapes, found with it (`CallFormat.shape`; docs/reply.md has the table and the formats
that fit none):

- `list`: the calls are one JSON list (`[TOOL_CALLS][{"name": ..., "arguments": ...}]`) or one Python list of calls
  (`[f(a=1)]`); one region from the list's opener to its closer, read by transformers' `json` or `python-call-list`.
- `object`: each call is one JSON object (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`); one region per
  call, read by `json`.
- `named`: the name is written before the arguments (`[TOOL_CALLS]NAME[ARGS]{...}`, `<function=NAME>
  <parameter=K>V</parameter>`); the opener captures it, the region is the arguments, read by `json` or `xml-inline`.
- `keyed` (`[{"NAME": {...}}]`) and `lines` (one Python call a line between an opening and a closing text): regions
  transformers delimits but whose values its parsers and transforms cannot turn into calls; chatcaps reads them
  itself (a key as the name; the lines joined into a list for `python-call-list`), and the exported template leaves
  them out.

Exported (`strict`), the field's transform gives transformers' own message shape. chatcaps parses with the same
regions but keeps what bad output could make a content parser or a transform raise out of the parser: a `list` or
`object` region is kept as text and parsed here with transformers' own content parsers, a `named` region's JSON
parser falls back to the text (`allow_non_json`). What does not parse becomes a warning quoting the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from typing import Any

from chatcaps.caps import CallFormat, CallShape
from chatcaps.events import Call
from chatcaps.reply.holes import NAME_PATTERN, pattern
from chatcaps.reply.parameters import parameter_pattern
from chatcaps.vocab import PLACEHOLDER, read_quoted

TOOL_CALLS, LIST_END = "tool_calls", "tool_calls_end"
"""The calls' field, and one that takes the text closing a list of calls and holds nothing: a close pattern with the
list's closing text as an optional part would commit without it when the text arrives in pieces."""
CALL_SEPARATOR = "call_separator"
"""chatcaps' grammar only: punctuation between two bare JSON calls where the template writes one call per turn (no
separator is known); the field holds that text (a capture, closed at once), which `ReplyStream` quotes in a warning."""
PUNCTUATION = r"\s*[;,][\s;,]*|\s+"
"""What may stand between two calls where the template writes one call per turn: `;` or `,` with whitespace, or
whitespace alone (newlines)."""
OWN: frozenset[CallShape] = frozenset({"keyed", "lines"})
"""Shapes transformers' format cannot express (docs/reply.md): chatcaps reads them with its own few lines, and the
exported template has no `tool_calls` field for them."""
_WRITTEN_ID = re.compile(r"[^\s<>\"'|$]*\$\{name\}[^\s<>\"'|$]*\$\{index\}[^\s<>\"'|]*")


def written_id(calls: CallFormat) -> str | None:
    """The text a call writes to name itself where the template writes no id of the request's: one word holding the
    call's name and its position (Kimi's `functions.${name}:${index}`, which its tool results quote). A reply's call
    takes it, filled, as its id (`filled_id`); None where the call has no such word or writes the request's id."""
    if "${id}" in calls.call:
        return None
    found = _WRITTEN_ID.search(calls.call)
    return found.group() if found else None


def filled_id(calls: CallFormat, name: str, index: str | None) -> str | None:
    """`written_id` with a call's name and the position it was written with; None without either."""
    template = written_id(calls)
    if template is None or index is None:
        return None
    return template.replace("${name}", name).replace("${index}", index)


def exportable(calls: CallFormat) -> bool:
    """Whether transformers' format can express the calls (docs/reply.md): not the `keyed` and `lines` shapes, nor
    the "quoted" arguments form (no content parser of transformers reads it); chatcaps reads those itself, and the
    exported template has no `tool_calls` field for them."""
    return calls.shape not in OWN and calls.arguments != "quoted"


Channel = tuple[str, str, tuple[str, ...], str]
"""A channel-style template's reasoning end marker, generation prompt, content headers and reasoning start marker
(`<|end|>`, `<|start|>assistant`, `("<|start|>assistant<|channel|>final<|message|>",)`,
`<|channel|>analysis<|message|>`)."""


def header_parts(calls: CallFormat | None, headers: tuple[str, ...]) -> tuple[str, str]:
    """Patterns for a message header's tags and words, from the headers the renders show (the content headers, the
    call's text before its arguments): the words are theirs (`final`, `commentary`, `json`, ...); a tag is one of
    theirs or, where all of theirs share a shape (`<|...|>` with a lower-case name), any tag of that shape, so that a
    header token the template never writes but the model does (gpt-oss' `<|constrain|>`) is read as grammar."""
    texts = [*headers, calls.call[: calls.call.index("${arguments}")] if calls and "${arguments}" in calls.call else ""]
    text = PLACEHOLDER.sub(" ", " ".join(texts))
    # Longest first, ties in text order: a set's own order changes with the process (the exported pattern would too).
    tags = sorted(set(re.findall(r"<[^<>\s]+>", text)), key=lambda tag: (-len(tag), tag))
    words = sorted(set(re.findall(r"[A-Za-z]+", re.sub(r"<[^<>\s]+>", " ", text))), key=lambda word: (-len(word), word))
    shaped = all(re.fullmatch(r"<\|[a-z_]+\|>", tag) for tag in tags)
    tag = r"<\|[a-z_]+\|>" if tags and shaped else "|".join(re.escape(tag) for tag in tags) or "(?!)"
    return f"(?:{tag})", f"(?:{'|'.join(words) or '(?!)'})"


def attributes(calls: CallFormat | None, headers: tuple[str, ...], *never: str) -> str:
    """A message header's tags, each with a word of the headers' after it (`<|channel|>commentary `), never one of
    the texts `never` (the reasoning's start and end markers): words the headers write, not any text, so that no
    generated character is taken for grammar and a pattern still waiting for more does not hold back the text after
    every tag."""
    tag, word = header_parts(calls, headers)
    texts = "|".join(re.escape(text) for text in never if text)
    not_never = rf"(?!{texts})" if texts else ""
    return rf"(?:{not_never}{tag}{word}?\s*)*?"


def message_head(calls: CallFormat, channel: Channel | None) -> tuple[str, str] | None:
    """For a `named` call written as a message of its own in a channel-style template (its text opens with the
    reasoning end marker and the generation prompt, `<|end|><|start|>assistant to=functions.${name}<|channel|>
    commentary json<|message|>`): the call's opener up to the name, and the pattern from the name to the arguments.

    Read loosely, as models write it: the end marker and the prompt are each optional (the reasoning's close, or
    the prompt, wrote them), header tags with a word each may come before the recipient, and header tags and words
    may come between the name and the tag that opens the arguments (gpt-oss models write
    `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`; `header_parts` says which). The words
    are those of every channel the template writes, the reasoning's included: a model addresses a call on the
    analysis channel too (`<|channel|>analysis to=functions.NAME<|message|>`), and the recipient makes it a call."""
    if channel is None or calls.shape != "named" or calls.begin.strip():
        return None
    head = calls.call[: calls.call.index("${arguments}")]
    lead, _, middle = head.partition("${name}")
    end, prompt, content_headers, start = channel
    headers = (*content_headers, start)
    rest, parts = lead.strip(), list[str]()
    for marker in (end, prompt):
        if marker and rest.startswith(marker):
            parts.append(rf"(?:{re.escape(marker)}\s*)?")
            rest = rest[len(marker) :].strip()
    tags = re.findall(r"<[^<>\s]+>", middle)
    if not prompt or not rest or "${" in lead + middle or not tags or not middle.rstrip().endswith(tags[-1]):
        return None
    if not lead.strip().removeprefix(end).strip().startswith(prompt):
        return None
    tag, word = header_parts(calls, headers)
    between = rf"(?:\s*(?:{tag}|{word}))*?\s*"
    opener = "".join(parts) + attributes(calls, headers) + re.escape(rest)
    return opener, rf"\s*{NAME_PATTERN}{between}{re.escape(tags[-1])}"


def tool_calls_fields(
    calls: CallFormat, end_of_turn: str | None, *, strict: bool, channel: Channel | None = None, prompt: str = ""
) -> dict[str, Any]:
    """The `tool_calls` field for `calls` (none where the format fits no shape), and `tool_calls_end` where a call
    list has closing text of its own; with `channel`, a call written as a message of its own reads its header
    loosely (`message_head`). A `named` call whose opening text the generation prompt (`prompt`) already ends with
    may start the message without it (`prompt_opened`)."""
    shape = calls.shape
    if shape is None or (strict and not exportable(calls)):
        return {}
    builders: dict[CallShape, Callable[..., dict[str, Any]]] = {
        "list": _list_field,
        "keyed": _list_field,
        "lines": _lines_field,
        "object": _object_field,
        "named": partial(_named_field, prompt=prompt),
    }
    loose = message_head(calls, channel)
    if loose is not None:
        return {TOOL_CALLS: _message_field(calls, loose, strict=strict)}
    ends = tuple(end for end in (end_of_turn, *calls.alternative_turn_ends) if end)
    fields = {TOOL_CALLS: builders[shape](calls, ends, strict=strict)}
    if calls.alternative_openers:  # a call may come after one of them, which is grammar
        alternative = "|".join(re.escape(opener) for opener in calls.alternative_openers)
        fields[TOOL_CALLS]["open_pattern"] = rf"(?:(?:{alternative})\s*)?(?:{fields[TOOL_CALLS]['open_pattern']})"
    if one_per_turn(calls) and not strict:
        fields[CALL_SEPARATOR] = {
            "open_pattern": rf"(?<=\}})(?P<separator>{PUNCTUATION})(?={_object_body(calls)})",
            "close_pattern": r"(?=[\s\S])",
            "transform": "{separator}",
        }
    closing = [pattern(text) for text in (_own_end(calls, ends), _tag_separator(calls)) if text]
    if shape in ("object", "named") and closing:
        fields[LIST_END] = {"open_pattern": "|".join(closing), "close_pattern": r"(?=[\s\S])"}
    return fields


def _own_end(calls: CallFormat, ends: tuple[str, ...]) -> str:
    """The text closing a turn's calls less an end of turn it ends with (DeepSeek-R1 writes its calls' closing token
    and then its end-of-sentence token): the end of turn is a field of its own, and a server strips it as the stop
    token, so the calls' own closing text must close them without it."""
    end = calls.end.strip()
    for turn_end in (text.strip() for text in ends if text.strip()):
        if end.endswith(turn_end) and end != turn_end:
            return end[: len(end) - len(turn_end)].strip()
    return end


def _tag_separator(calls: CallFormat) -> str:
    """The separator where it is tags alone (muse-glimmer's `<|eom|>` ends each call's message but the last): grammar
    like the list's closing text, between calls and after the last (a model stops after a call with it); ""
    otherwise."""
    separator = (calls.separator or "").strip()
    return separator if re.fullmatch(r"(?:<[^<>\s]+>\s*)+", separator) else ""


def prompt_opened(calls: CallFormat, prompt: str) -> str | None:
    r"""For a `named` format whose opening text (before the name) the generation prompt ends with, whole or in part
    (functionary's prompt ends `>>>`, its calls are `>>>NAME\n{...}`; muse-glimmer's ends `<|start|>assistant`, its
    calls `<|start|>assistant to=NAME<|message|><atem:function_calls>...`): a pattern for the first call's opening at
    the very start of the message, the rest of that text only. An answer then opens as a call does (`>>>all\n`,
    `<|start|>assistant to=user<|message|>`): a call's opening counts only before the rest of its head (`call_ahead`).
    None for any other format or prompt."""
    if calls.shape != "named":
        return None
    head = calls.call[: calls.call.index("${arguments}")]
    lead = (calls.begin + head[: head.index("${")]).strip()
    named = head[head.index("${") :]
    if not lead or PLACEHOLDER.findall(named)[:1] != ["name"] or "${id}" in named or "${index}" in named:
        return None
    written = next((at for at in range(len(lead), 0, -1) if _tail_of(prompt, lead[:at], lead[at:])), 0)
    if not written or not (calls.arguments == "json" or named[len("${name}") :].strip()):
        return None
    rest = lead[written:].strip()
    return rf"\A\s*{pattern(rest)}" if rest else r"\A"


def call_ahead(calls: CallFormat) -> str:
    """A lookahead on a `named` call's head from its name to its arguments, and JSON arguments' `{`: where an answer
    opens as a call does (`prompt_opened`), what tells them apart."""
    head = calls.call[: calls.call.index("${arguments}")]
    named = re.sub(r"\(\?P<\w+>", "(?:", pattern(head[head.index("${") :]))
    named = named.replace("(?P=name)", NAME_PATTERN.replace("(?P<name>", "(?:"))
    json_start = r"\s*\{" if calls.arguments == "json" else ""
    return rf"(?=\s*{named}{json_start})"


def _tail_of(prompt: str, written: str, rest: str) -> bool:
    """`prompt` ends with `written`, whole words or tags: where it begins and where `rest` goes on are boundaries."""
    text = prompt.rstrip()
    if not text.endswith(written):
        return False
    before = text[: len(text) - len(written)]
    return (not before or before[-1].isspace() or before[-1] == ">") and (not rest or rest[0].isspace())


def one_per_turn(calls: CallFormat) -> bool:
    """A bare JSON object per call (no text before or after it) where the template writes one call per turn: models
    still write two, joined by punctuation (`{...}; {...}`), and nothing rendered says how; chatcaps reads the
    second as a further call, with a warning (docs/reply.md, "Bad output")."""
    if calls.separator is not None or calls.shape != "object" or calls.begin.strip() or calls.end.strip():
        return False
    body_start = next(at for at, char in enumerate(calls.call) if char == "{" and calls.call[at - 1 : at] != "$")
    return not calls.call[:body_start].strip() and not calls.call[calls.call.rindex("}") + 1 :].strip()


def _object_body(calls: CallFormat) -> str:
    """The start of a call's JSON object: `{` and one of its keys."""
    keys = "|".join(re.escape(key) for key in (calls.keys or {}).values())
    return rf"\{{\s*\"(?:{keys})\"\s*:"


def closing_text(calls: CallFormat) -> str:
    """The text a call's region closes with ("" where it closes where the next call or the turn's end begins): a
    region still open when the text ends then means the reply was cut off inside a call."""
    shape = calls.shape
    if shape in ("list", "keyed"):
        return calls.end.lstrip()[1:].strip()
    if shape == "lines":
        return calls.end.strip()
    if shape == "object":
        return calls.call[calls.call.rindex("}") + 1 :].strip()
    if shape == "named":
        return calls.call[calls.call.index("${arguments}") + len("${arguments}") :].strip()
    return ""


def streamed_head(calls: CallFormat, channel: Channel | None = None) -> re.Pattern[str] | None:
    """For a `named` format with JSON arguments or streamable parameters and text before the name: the pattern of
    the name and what follows it up to the arguments (an id included). chatcaps' grammar then opens the call's region
    before the name instead of after the arguments' opening, so that the name is known, and the arguments can
    stream, while the call is written."""
    if calls.shape != "named" or (calls.arguments != "json" and parameter_pattern(calls) is None):
        return None
    loose = message_head(calls, channel)
    if loose is not None:
        return re.compile(loose[1], re.DOTALL)
    head = calls.call[: calls.call.index("${arguments}")]
    if not head[: head.index("${")].strip() or PLACEHOLDER.findall(head)[:1] != ["name"]:
        return None
    middle = head[head.index("${name}") + len("${name}") :]
    # Where nothing is written between the name and the arguments (GLM's `<tool_call>NAME<arg_key>`), the name is
    # complete at the first character that cannot be part of it.
    named = pattern(f"${{name}}{middle}") if middle.strip() else rf"{NAME_PATTERN}(?=[^\w.\-])"
    return re.compile(rf"\s*{named}", re.DOTALL)


def _lined_python(text: str) -> tuple[Any, str]:
    """A Python call list whose string arguments hold raw line breaks, as models write code and heredocs
    (`[exec(command='cat > f.py << EOF` and a real line break after it): Python's grammar refuses a line break in a
    one-quote string, so the breaks inside strings are escaped and the list read again. (None, text) where it still
    does not read."""
    from transformers.utils.chat_parsing.content_parsers import parse_content

    escaped = _escape_breaks_in_strings(text)
    if escaped == text:
        return None, text
    try:
        return parse_content(escaped, "python-call-list", {}), ""
    except ValueError:
        return None, text


_TRIPLE_QUOTES = ("'" * 3, '"' * 3)


def _escape_breaks_in_strings(text: str) -> str:
    """`text` with each line break inside a one-quote Python string literal written as an escape (`\\n`, `\\r`), the
    rest as it is; a triple-quoted string may hold breaks and is left alone."""
    out: list[str] = []
    quote, at = "", 0
    while at < len(text):
        char = text[at]
        if not quote and text.startswith(_TRIPLE_QUOTES, at):
            end = text.find(text[at : at + 3], at + 3)
            end = len(text) if end < 0 else end + 3
            out.append(text[at:end])
            at = end
            continue
        if not quote:
            quote = char if char in "'\"" else ""
        elif char == "\\":
            out.append(text[at : at + 2])
            at += 2
            continue
        elif char == quote:
            quote = ""
        elif char in "\r\n":
            char = "\\n" if char == "\n" else "\\r"
        out.append(char)
        at += 1
    return "".join(out)


def _closers(tail: str, end: str, next_call: str | None, ends: tuple[str, ...]) -> dict[str, str]:
    """The region's close: the call's own closing text, else the list's closing text, the next call's opening or the
    end of turn, whichever comes first (the last two are not consumed).

    `next_call` is a zero-width pattern; it must not match where the region opens, or a region that opens with no
    width would close and open again at the same place for ever."""
    if tail.strip():
        return {"close_pattern": pattern(tail.strip())}
    options = [rf"\s*{pattern(end.strip())}"] if end.strip() else []
    if next_call:
        options.append(next_call)
    if ends:
        options.append(rf"(?={'|'.join(re.escape(end) for end in ends)})")
    return {"close_pattern": "|".join(options)} if options else {}


def _function(name: str, arguments: str, call_id: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return {**out, "id": call_id} if call_id else out


_RAW = {"content": "text", "content_args": {"strip": False}}


def _list_field(calls: CallFormat, ends: tuple[str, ...], *, strict: bool) -> dict[str, Any]:
    opener, closer = calls.begin.rstrip()[:-1].strip(), calls.end.lstrip()[1:].strip()
    names = "|".join(re.escape(key) for key in (calls.keys or {}).values())
    first = r"[A-Za-z_][\w.\-]*\(" if calls.arguments == "python" else r"\{\s*\""
    if calls.keys:
        first = rf"\{{\s*\"(?:{names})\"\s*:"
    field: dict[str, Any] = {
        "open_pattern": pattern(opener) if opener else rf"(?=\[\s*{first})",
        **({"close_pattern": pattern(closer)} if closer else _closers("", "", None, ends)),
    }
    if not strict:
        return {**field, **_RAW}
    if calls.keys:
        keys = calls.keys  # no id: a model may leave it out, and a transform's missing placeholder raises
        transform = _function(f"{{{keys['name']}}}", f"{{{keys['arguments']}}}", None)
        return {**field, "content": "json", "transform": transform, "transform_each": True}
    transform = _function("{name}", "{arguments}", None)
    return {**field, "content": "python-call-list", "transform": transform, "transform_each": True}


def _lines_field(calls: CallFormat, ends: tuple[str, ...], *, strict: bool) -> dict[str, Any]:
    return {"open_pattern": pattern(calls.begin.strip()), "close_pattern": pattern(calls.end.strip()), **_RAW}


def _object_field(calls: CallFormat, ends: tuple[str, ...], *, strict: bool) -> dict[str, Any]:
    body_start = next(at for at, char in enumerate(calls.call) if char == "{" and calls.call[at - 1 : at] != "$")
    body_end = calls.call.rindex("}") + 1
    head, tail = calls.call[:body_start], calls.call[body_end:]
    keys = "|".join(re.escape(key) for key in (calls.keys or {}).values())
    body = rf"\{{\s*\"(?:{keys})\"\s*:"
    begin = rf"(?:{pattern(calls.begin.strip())}\s*)?" if calls.begin.strip() else ""
    # With no text before the object, the region opens on a lookahead; the next object's lookahead closes it only
    # after a `}`, where it never opens: a close and an open of no width at one place would repeat for ever.
    opening = rf"{begin}{pattern(head.strip())}" if head.strip() else rf"{begin}(?<!\}})(?={body})"
    next_call = rf"(?=\s*{pattern(head.strip())})" if head.strip() else rf"(?<=\}})(?=\s*{body})"
    if one_per_turn(calls) and not strict:  # a further call after punctuation: the region closes before it
        next_call = rf"(?<=\}})(?=(?:{PUNCTUATION})?{body})"
    field = {"open_pattern": opening, "repeats": True, **_closers(tail, calls.end, next_call, ends)}
    if not strict:
        return {**field, **_RAW}
    keys_of = calls.keys or {}
    transform = _function(f"{{content.{keys_of['name']}}}", f"{{content.{keys_of['arguments']}}}", None)
    return {**field, "content": "json", "transform": transform}


def _named_field(calls: CallFormat, ends: tuple[str, ...], *, strict: bool, prompt: str = "") -> dict[str, Any]:
    at = calls.call.index("${arguments}")
    head, tail = calls.call[:at], calls.call[at + len("${arguments}") :]
    begin = rf"(?:{pattern(calls.begin.strip())}\s*)?" if calls.begin.strip() else ""
    lead = head[: head.index("${")].strip()
    next_call = rf"(?=\s*{pattern(lead)})" if lead else None
    opening = begin + pattern(head[: head.index("${")].lstrip())
    opened = prompt_opened(calls, prompt)
    if opened is not None:  # the prompt wrote the first call's opening text, as it does an answer's
        opening = rf"(?:{opening}|{opened}){call_ahead(calls)}"
    field: dict[str, Any] = {
        "open_pattern": opening + pattern(head[head.index("${") :]),
        "repeats": True,
        **_closers(tail, calls.end, next_call, ends),
    }
    if not strict and streamed_head(calls) is not None:
        return {**field, "open_pattern": opening, **_RAW}
    if calls.arguments == "parameters" and calls.parameter:
        field |= {"content": "xml-inline", "content_args": {"tag_pattern": pattern(calls.parameter.strip())}}
    else:
        field |= {"content": "json"} if strict else {"content": "json", "content_args": {"allow_non_json": True}}
    call_id = "{id}" if "${id}" in head else None
    if strict:
        return {**field, "transform": _function("{name}", "{content}", call_id)}
    transform = {"function": {"name": "{name}", "arguments": "{content}"}, "id": call_id or ""}
    return {**field, "transform": transform | ({"index": "{index}"} if "${index}" in head else {})}


def _message_field(calls: CallFormat, loose: tuple[str, str], *, strict: bool) -> dict[str, Any]:
    """A call that is a message of its own (`message_head`): opened by its header, closed by its own closing text."""
    opener, head = loose
    tail = calls.call[calls.call.index("${arguments}") + len("${arguments}") :]
    field: dict[str, Any] = {"repeats": True, **_closers(tail, calls.end, None, ())}
    if not strict:
        return {**field, "open_pattern": opener, **_RAW}
    field |= {"open_pattern": opener + head, "content": "json"}
    return {**field, "transform": _function("{name}", "{content}", None)}


def quoted_arguments(calls: CallFormat, arguments: Any) -> Any:
    """The "quoted" form's arguments text as an object (`vocab.read_quoted`, the quoting token being what follows
    `${value}` in `parameter`); the text as it is for other forms or where it does not read (then warned)."""
    if calls.arguments != "quoted" or not isinstance(arguments, str) or not calls.parameter:
        return arguments
    quote = calls.parameter.partition("${value}")[2]
    try:
        found, end = read_quoted(arguments.strip(), quote)
    except ValueError:
        return arguments
    return found if end == len(arguments.strip()) else arguments


@dataclass(frozen=True)
class Read:
    """What one `tool_calls` region held: its calls (arguments as JSON text, the id None where none is written) and
    warnings."""

    calls: tuple[Call, ...]
    warnings: tuple[str, ...]
    content: str = ""
    """What of the region's text is no call and goes back into the content where it stood: the text after a call
    that parses, or a region that does not parse, with the call's opening text (a warning says so)."""


def read_region(value: Any, raw: str, calls: CallFormat, tool_names: Collection[str]) -> Read:
    """The calls in one closed region: `value` is the parser's value for it (chatcaps' grammar), `raw` its text."""
    from transformers.utils.chat_parsing.content_parsers import parse_content

    shape = calls.shape
    items: list[tuple[Any, Any, Any]] = []
    warnings: list[str] = []
    after = ""
    if shape == "named":
        function = value.get("function", {}) if isinstance(value, dict) else {}
        name, index = function.get("name"), value.get("index") if isinstance(value, dict) else None
        written = filled_id(calls, name, index) if isinstance(name, str) else None
        items.append((name, quoted_arguments(calls, function.get("arguments")), value.get("id") or written))
        if calls.arguments == "parameters" and calls.parameter:
            after = re.sub(pattern(calls.parameter.strip()), "", raw, flags=re.DOTALL).strip()
            if after:
                warnings.append(f"text in a tool call that is no parameter, kept as content: {after!r}")
    else:
        kind = "python-call-list" if calls.arguments == "python" else "json"
        text = raw
        if shape == "lines":  # one call a line: as a list, for transformers' Python call-list parser
            text = "[" + ", ".join(line.strip() for line in raw.splitlines() if line.strip()) + "]"
        try:
            parsed = parse_content(text, kind, {})
        except ValueError:
            parsed, after = _leading_json(text) if kind == "json" else _lined_python(text)
            if parsed is None:
                kept = opening_text(calls) + raw
                return Read((), (f"a tool call that does not parse, kept as content: {raw!r}",), kept)
            if after.strip():
                warnings.append(f"text after a tool call in its region, kept as content: {after.strip()!r}")
        if shape == "keyed":
            parsed = [_unkeyed(item) for item in parsed] if isinstance(parsed, list) else parsed
        keys = calls.keys or {"name": "name", "arguments": "arguments"}
        listed = parsed if shape in ("list", "keyed", "lines") and isinstance(parsed, list) else [parsed]
        for item in listed:
            if not isinstance(item, dict):
                warnings.append(f"a tool call that is no object, not read: {json.dumps(item, ensure_ascii=False)!r}")
                continue
            if keys["arguments"] not in item and isinstance(item.get(keys["name"]), str):
                warnings.append(f"a call to {item[keys['name']]!r} without {keys['arguments']!r}, read as {{}}")
            items.append((item.get(keys["name"]), item.get(keys["arguments"]), item.get(keys.get("id", ""))))
    read: list[Call] = []
    for name, arguments, call_id in items:
        if not isinstance(name, str) or not name:
            kept = "not read" if shape == "named" else "kept as content"  # a named region's name is in its opening
            warnings.append(f"a tool call without a name, {kept}: {raw!r}")
            continue
        if tool_names and name not in tool_names:
            warnings.append(f"a call to {name!r}, which is not among the tools; kept")
        read.append(Call(name, _arguments(arguments, name, warnings), call_id if isinstance(call_id, str) else None))
    if items and not read and shape != "named":  # no call in it: the region's text is content
        return Read((), tuple(warnings), opening_text(calls) + raw)
    return Read(tuple(read), tuple(warnings), after)


def _leading_json(text: str) -> tuple[Any, str]:
    """The JSON value `text` starts with and the text after it (a bare JSON call closes only at the end of turn, so
    what the model wrote after the call is in its region); (None, text) where it starts with none."""
    stripped = text.lstrip()
    try:
        parsed, end = json.JSONDecoder().raw_decode(stripped)
    except ValueError:
        return None, text
    return parsed, stripped[end:]


def opening_text(calls: CallFormat) -> str:
    """The literal text a call's region opens after, as the template writes it ("" where the region opens on a
    lookahead): what goes back into the content, before the region's text, where a call does not parse."""
    shape = calls.shape
    if shape in ("list", "keyed"):
        text = calls.begin.rstrip()[:-1]
    elif shape == "lines":
        text = calls.begin
    else:
        text = calls.call[: calls.call.index("${") if "${" in calls.call else 0]
        body = re.search(r"(?<!\$)\{", text) if shape == "object" else None
        text = text[: body.start()] if body else text
    return text.strip()


def _unkeyed(item: Any) -> Any:
    """`{"NAME": {...}}` as `{"name": NAME, "arguments": {...}}`; anything else as it is (then not read, warned)."""
    if isinstance(item, dict) and len(item) == 1:
        ((name, arguments),) = item.items()
        return {"name": name, "arguments": arguments}
    return item


def _arguments(arguments: Any, name: str, warnings: list[str]) -> str:
    """The arguments as OpenAI writes them: a JSON object as text; none written (no key, or null) is `{}`."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False)
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    try:
        loaded = json.loads(text)
    except ValueError:
        loaded = None
    if not isinstance(loaded, dict):
        warnings.append(f"the arguments of {name!r} are no JSON object; kept as text: {text!r}")
    return text
