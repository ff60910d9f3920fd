"""The end of turn and the tool-call format: read off assistant turns rendered with sentinel calls (probes/calls.json).

Four renders of `[user, assistant]` with the same content: no call (`r0`), call 1 (`r1`), call 2 (`r1b`), both
(`r2`). The turn's calls are what `r1` has where `r0` differs; call 1 ends where `r1` and `r2` part, call 2 starts
where `r2` and `r1b` meet again, and the text between is the separator. Call 2's text becomes the `call` template once
its name, id and arguments are replaced by placeholders; the arguments are found by reading them back (a JSON object,
a JSON string, Python keyword arguments), else by the repeated shape of its two parameters. Nothing is keyed on what
the template is called or what its source says.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import Any

from chatcaps.caps import ArgumentsForm, CallFormat, Tools, call_shape
from chatcaps.probes.prober import Conversation, Prober
from chatcaps.probes.prompt import base_conversation, generation_prompt
from chatcaps.probes.text import ONE_TAG
from chatcaps.probes.tools import Shape, detect_tools, tool_call_shape
from chatcaps.vocab import common_prefix_length, placeholder_pattern, read_quoted

NAME, ARGUMENTS, ID, INDEX, KEY, VALUE = "${name}", "${arguments}", "${id}", "${index}", "${key}", "${value}"
USER1, USER2 = "Zq7User1", "Zq7User2"
Span = tuple[int, int]


@cache
def _data() -> dict[str, Any]:
    return json.loads(resources.files("chatcaps.probes").joinpath("calls.json").read_text("utf-8"))  # type: ignore[no-any-return]


def _turn(calls: list[dict[str, Any]], shape: Shape, content: str | None) -> Conversation:
    copied: list[dict[str, Any]] = json.loads(json.dumps(calls))
    for call in copied:
        if shape == "string":
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"], ensure_ascii=False)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if copied:
        message["tool_calls"] = copied
    return [{"role": "user", "content": USER1}, message]


def _render(prober: Prober, probe: str, calls: list[dict[str, Any]], shape: Shape, content: str | None) -> str | None:
    return prober.render(probe, _turn(calls, shape, content), tools=_data()["tools"])


def _call_render(
    prober: Prober, probe: str, calls: list[dict[str, Any]], shape: Shape, content: str | None
) -> str | None:
    """The turn rendered with the sentinel tools, or without tools where they alone make it raise (the error
    recorded under the probe): a template's call syntax does not hang on its tool list."""
    turn = _turn(calls, shape, content)
    output = prober.render(probe, turn, tools=_data()["tools"])
    if output is None and prober.attempt(probe, turn[:1], tools=_data()["tools"]).error is not None:
        return prober.render(probe, turn)
    return output


_TOKEN_START = re.compile(r"[<\[]|(?<=\s)\S")
"""Where a piece of text may start: a tag, or a word after whitespace."""


def detect_end_of_turn(prober: Prober, *, unlisted: bool = False) -> str | None:
    """The text an assistant turn ends with, less layout whitespace: what follows its content where it is the last
    message, cut to what it shares with the text before the next turn's header where a user turn follows.

    A render that ends with the assistant turn may write more than the turn's end: a generation prompt the template
    always appends (`<|im_end|>\n<|im_start|>assistant`), instructions after the conversation (Cohere's tool_use
    text, Llama Guard's assessment request), an end of text after the last message (`<|end|>\n<|endoftext|>`). A
    following user turn keeps only the turn's end and the next turn's opening; where both renders go on past the text
    they share, that text may end with the opening every turn starts with (`<|im_start|>`, `<|START_OF_TURN_TOKEN|>`),
    which the first user turn is headed with too: it is cut off, or, where the turn writes nothing else
    (`\n<extra_id_1>`), it is the end. Where the two share nothing, the last turn's own end is kept only as one tag
    (gpt-oss' `<|return|>` against `<|end|>` in history). Where only the last turn renders, what follows it.
    `unlisted`: rendered with no tools (a template that raises on any tool list but renders calls without one)."""
    content = _data()["content"]
    tools = None if unlisted else _data()["tools"]
    output = prober.render("end_of_turn", _turn([], "object", content), tools=tools)
    if output is None or content not in output:
        return None
    last = output[output.rindex(content) + len(content) :].strip()
    turns = [*_turn([], "object", content), {"role": "user", "content": USER2}]
    following = prober.render("end_of_turn", turns, tools=tools)
    if following is None or content not in following or USER2 not in following.partition(content)[2]:
        return last or None
    head, _, rest = following.partition(content)
    first_header = head[: head.index(USER1)] if USER1 in head else ""
    return _own_end(last, rest[: rest.index(USER2)].lstrip(), first_header)


def _own_end(last: str, before_next: str, first_header: str) -> str | None:
    """`last` (what follows the last turn's content) cut to the turn's own end, seen in `before_next` (the text
    between the turn's content and the next user turn's) and `first_header` (the text before the first user turn's
    content). See `detect_end_of_turn`."""
    common = common_prefix_length(last, before_next)
    if common == len(last):
        return last or None
    shared = _back_to_word(before_next, common)
    if not before_next[:shared].strip():
        return last if ONE_TAG.fullmatch(last) else None
    header = before_next[shared:]
    for start in reversed([match.start() for match in _TOKEN_START.finditer(before_next, 0, shared)]):
        opening = before_next[start:shared]
        if first_header.endswith(opening + header):
            return before_next[:start].strip() or opening.strip()
    return before_next[:shared].strip()


def _back_to_word(text: str, at: int) -> int:
    """`at`, or where the tag or word it cuts starts: two renders that part inside `<|START_THINKING|>` against
    `<|START_RESPONSE|>`, or inside `Assistant` against `Agent`, share what comes before it."""
    at = _back_to_tag(text, at)
    while 0 < at < len(text) and not _word_boundary(text, at):
        at -= 1
    return at


def _word_boundary(text: str, at: int) -> bool:
    before, after = text[at - 1], text[at]
    return before.isspace() or after.isspace() or before in ">]" or after in "<["


def _suffix_length(one: str, other: str, *, digits: bool = False) -> int:
    """The length of the shared ending; with `digits`, two different digits count as shared (a call's index)."""
    length = common_prefix_length(one[::-1], other[::-1])
    while digits and length < min(len(one), len(other)):
        if not (one[-length - 1].isdigit() and other[-length - 1].isdigit()):
            break
        length += 1 + common_prefix_length(one[: -length - 1][::-1], other[: -length - 1][::-1])
    return length


CONTENTS: tuple[str | None, ...] = (_data()["content"], "", None)
"""The content beside the calls, tried in turn: empty where content beside calls raises, None where a template
writes calls only then (`message['content'] is none`)."""


def _renders(prober: Prober, shape: Shape) -> tuple[str, str, str, str | None, str | None] | None:
    """The turn with no call, call 1, call 2 and both, and the content they were rendered with: the first content
    under which the turn renders and shows call 1, and writes no content between the calls and the turn's end."""
    first, second = _data()["calls"]
    for content in CONTENTS:
        r0, r1, r1b, r2 = (
            _call_render(prober, f"calls.{probe}", calls, shape, content)
            for probe, calls in (("none", []), ("one", [first]), ("other", [second]), ("two", [first, second]))
        )
        if r0 is None and not content:  # a turn must hold content or calls, not both (mistral-common's rule)
            r0 = _call_render(prober, "calls.none", [], shape, _data()["content"])
        if r0 is None or r1 is None or r1b is None or first["function"]["name"] not in r1:
            continue
        r0 = _worded(prober, shape, r0, r1)
        start, tail = _calls_span(r0, r1, first["function"]["name"])
        if content and content in r1[start : len(r1) - tail]:
            continue  # the content follows the calls, before the turn's end (gemma-4): they are found without it
        return r0, r1, r1b, r2, content
    return None


def _shows_calls(prober: Prober, shape: Shape) -> bool:
    """The turn as the last message writes its calls: its renders with call 1 and with call 2 differ (a template
    that takes a final assistant message for a prefill writes only its content)."""
    renders = _renders(prober, shape)
    return renders is not None and renders[1] != renders[2]


def _worded(prober: Prober, shape: Shape, r0: str, r1: str) -> str:
    """The turn without calls to diff the calls against: `r0`, or the turn with the sentinel content and no calls
    where that parts from `r1` sooner (a template that writes an empty call list, its opening and closing tags, for a
    turn with empty content and no calls: the list's own opening and closing are the calls' text)."""
    worded = _call_render(prober, "calls.none", [], shape, _data()["content"])
    if worded is None or worded == r0 or common_prefix_length(worded, r1) >= common_prefix_length(r0, r1):
        return r0
    return worded


def detect_call_format(prober: Prober, tools: Tools, containers: Sequence[str] = ()) -> CallFormat | None:
    """The call format, or None where the four renders do not show one call text repeated per call; with the shape
    a reply's calls are read in (`call_shape`), and the text a list-valued variable among `containers` makes the
    template write before a call and end its turn with (`alternatives`). Where the sandbox refuses every turn with a
    call (`refused`), read off renders that let the template change the data it builds."""
    found = _call_format(prober, tools)
    if found is None and tools.calls and not _shows_calls(prober, tool_call_shape(tools)):
        # No turn shows its calls as the last message: read the format off the turn as a past one.
        found = _call_format(prober.followed({"role": "user", "content": USER2}), tools)
    if found is None and not tools.calls and refused(prober):
        prober = prober.mutable()
        tools = detect_tools(prober)
        found = _call_format(prober, tools)
    if found is None:
        return None
    found = replace(found, shape=call_shape(found))
    if not containers:
        return found
    openers, ends = alternatives(prober, tool_call_shape(tools), containers)
    return replace(found, alternative_openers=openers, alternative_turn_ends=ends)


def refused(prober: Prober) -> bool:
    """Whether the turn with a call raises where the same turn without one renders: the template fails on the call
    itself, and `detect_call_format` reads the format off renders in transformers' environment less its
    immutability (`Prober.mutable`). Kimi-K2 collects each call's id with `ids.append(...)`, which transformers'
    sandbox refuses (minijinja has no such method), so no turn with a call renders; what it writes for a call there
    is still what the model writes. `calls` stays false, as a user's render cannot write a call (the polyfill writes
    it as text), and `probe_errors` name the refused probes."""
    content, tools = _data()["content"], _data()["tools"]
    none, one = (_turn(calls, "object", content) for calls in (list[dict[str, Any]](), _data()["calls"][:1]))
    return (
        prober.preview("calls.refused", none, tools=tools).output is not None
        and prober.preview("calls.refused", one, tools=tools).output is None
    )


def after_reasoning(calls: CallFormat | None, start: str | None, end: str | None) -> CallFormat | None:
    """`calls` less the empty reasoning block (between the `start` and `end` markers) its begin opens with: a
    template that writes a call turn's reasoning right before its calls writes the block empty where there is none
    (Command R7B: `<|START_THINKING|><|END_THINKING|><|START_ACTION|>[`). The model writes its reasoning there, or
    the generation prompt closed the block, so the calls' own opening is what follows the block."""
    if calls is None or not (start and end):
        return calls
    opened = calls.begin.lstrip()
    inside = opened[len(start) :].lstrip()
    if not (opened.startswith(start) and inside.startswith(end)):
        return calls
    found = replace(calls, begin=inside[len(end) :])
    return replace(found, shape=call_shape(found))


def alternatives(prober: Prober, shape: Shape, containers: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tags the template writes before a call, and the ones it ends the turn with instead of its own, where one
    of `containers` (variables a value is looked up in) holds the call's name: Llama 3.1 writes `<|python_tag|>`
    before a call to a name in `builtin_tools`, and ends such a turn with `<|eom_id|>` instead of `<|eot_id|>`.

    Two renders per variable, the turn without and with call 1 (silently: a variable that breaks the template
    says nothing), each compared with the same turn rendered without the variable. A tag counts where the renders
    without the variable never write it: a model trained on both writes it before calls of either kind."""
    first = _data()["calls"][0]
    name = first["function"]["name"]
    openers: dict[str, None] = {}
    ends: dict[str, None] = {}
    for content in (_data()["content"], ""):
        plain = [_attempt(prober, calls, shape, content, None) for calls in ([], [first])]
        if plain[0] is not None and plain[1] is not None:
            break
    else:
        return (), ()
    r1 = plain[1]
    for variable in containers:
        a0, a1 = (_attempt(prober, calls, shape, content, {variable: [name]}) for calls in ([], [first]))
        if a0 is None or a1 is None or a1 == r1 or name not in a1:
            continue
        alt_start, alt_tail = _calls_span(a0, a1, name)
        alt_call = a1[alt_start : len(a1) - alt_tail]
        opener = re.match(r"\s*((?:<[^<>\s]+>\s*)+)", alt_call)
        if opener is not None and name in alt_call[opener.end() :] and opener.group(1).strip() not in r1:
            openers.setdefault(opener.group(1).strip())
        plain_end, alt_end = (re.search(r"<[^<>\s]+>(?=\s*\Z)", text) for text in (r1, a1))
        if plain_end is not None and alt_end is not None and alt_end.group() not in r1:
            ends.setdefault(alt_end.group())
    return tuple(openers), tuple(ends)


def _attempt(
    prober: Prober, calls: list[dict[str, Any]], shape: Shape, content: str, kwargs: Mapping[str, Any] | None
) -> str | None:
    """A render that records no error: the variables probed are guesses."""
    turn = _turn(calls, shape, content)
    return prober.attempt("calls.alternatives", turn, tools=_data()["tools"], kwargs=kwargs).output


def _call_format(prober: Prober, tools: Tools) -> CallFormat | None:
    if not tools.calls:
        return None
    shape = tool_call_shape(tools)
    first, second = _data()["calls"]
    renders = _renders(prober, shape)
    if renders is None:
        return None
    r0, r1, r1b, r2, content = renders
    start, tail = _calls_span(r0, r1, first["function"]["name"])
    if content is None and not tail:  # the turn without calls wrote nothing: the end of turn follows the calls
        tail = _end_of_turn_length(prober, r1)
    if r2 is None or second["function"]["name"] not in r2[start:]:
        return _single(prober, r0, r1b, shape, content)
    first_end = min(_back_to_tag(r2, common_prefix_length(r1, r2)), len(r1) - tail)
    second_start = _on_to_tag_end(r2, len(r2) - min(_suffix_length(r1b, r2, digits=True), len(r2) - first_end))
    if not (start <= first_end <= len(r1) - tail and second_start <= len(r2) - tail):
        return None
    end = r1[first_end : len(r1) - tail]
    second_text = r2[second_start : len(r2) - tail]
    closed = _closed_after_two(prober, r1b, r2, first_end, second["function"]["name"])
    if closed is not None and not end:  # the list's end is written only after a further call
        second_start, second_end, end = closed
        second_text = r2[second_start:second_end] + end
    if not second_text.endswith(end):
        return None
    second_text = second_text[: len(second_text) - len(end)]
    found = _template(second_text, second, shape)
    if found is None:
        return None
    call, form, parameter = found
    name = first["function"]["name"]
    if name not in r1[start:first_end]:
        return None
    # The first call is found by the call's opening, less the layout before it (what follows the content may not
    # be what follows a call).
    head = call[: min(call.index(p) for p in (NAME, ARGUMENTS, ID) if p in call)].lstrip()
    head_pattern = "".join(r"\d+" if part.isdigit() else re.escape(part) for part in re.split(r"(\d+)", head))
    heads = list(re.finditer(head_pattern, r1[start : r1.index(name, start)]))
    # Where the turn's own opening wrote the first call's opening text (Harmony-like `<|start|>assistant to=NAME`,
    # each further call a message of its own), the first call's text starts where the calls do.
    opened = re.search(rf"{head_pattern}\Z", r1[: r1.index(name, start)]) if head else None
    if not heads and (opened is None or opened.start() >= start):
        return None
    call_start = start + heads[-1].start() if heads else start
    call, first_index = _indexed(call, r2[call_start:first_end])
    return CallFormat(
        begin=_model_begin(prober, r1[start:call_start], content),
        call=call,
        first_index=first_index,
        separator=r2[first_end:second_start],
        end=_before_end_of_turn(prober, end),
        arguments=form,
        parameter=parameter,
        keys=_keys(call, form),
        exact_values=_exact_values(prober, shape, form, parameter, content),
    )


def _end_of_turn_length(prober: Prober, text: str) -> int:
    """How much of `text`'s end is the end of turn, with the whitespace around it (0 where it does not end so)."""
    end_of_turn = detect_end_of_turn(prober)
    kept = text.rstrip()
    return len(text) - len(kept) + len(end_of_turn) if end_of_turn and kept.endswith(end_of_turn) else 0


def _model_begin(prober: Prober, begin: str, content: str | None) -> str:
    """What of `begin` the model writes: less the turn's opening, which the generation prompt wrote before the reply,
    where the calls open the turn (rendered with content None) or a turn of their own after the end of turn the
    template wrote for the content (Nemotron-Nano-v2 writes the last turn's content and calls as two turns:
    `\n<SPECIAL_12>\n<SPECIAL_11>Assistant\n<TOOLCALL>[`, the prompt `<SPECIAL_11>Assistant\n<think>\n`)."""
    if content is None:
        return _less_prompt(prober, begin)
    end_of_turn = detect_end_of_turn(prober)
    if not end_of_turn or end_of_turn not in begin:
        return begin
    after = begin[begin.rindex(end_of_turn) + len(end_of_turn) :].lstrip()
    opened = _less_prompt(prober, after)
    return opened if opened != after else begin


def _before_end_of_turn(prober: Prober, end: str) -> str:
    """`end` less the end of turn it closes with: the calls' text stops where the turn's does (DeepSeek-R1-Distill
    ends its calls with its end of sentence and writes the content after them as a turn of its own), and a server
    that strips the end of turn leaves the rest."""
    end_of_turn = detect_end_of_turn(prober)
    kept = end.rstrip()
    return kept[: len(kept) - len(end_of_turn)] if end_of_turn and kept.endswith(end_of_turn) else end


def _less_prompt(prober: Prober, begin: str) -> str:
    """`begin` less the part of the generation prompt it starts with (the turn's opening; a prompt that goes on to
    open a think block shares only that): a template that writes nothing for a turn with no calls and no content
    (the turn rendered where content is None) writes the turn's opening with the calls, and the prompt wrote that
    before the reply."""
    prompt = generation_prompt(prober, base_conversation(prober)) or ""
    shared = _back_to_tag(begin, common_prefix_length(begin, prompt))
    return begin[shared:] if prompt[:shared].strip() else begin


def _closed_after_two(prober: Prober, r1b: str, r2: str, first_end: int, name: str) -> tuple[int, int, str] | None:
    """Where call 2 starts and ends in `r2`, and the list's end after it, for a template that closes the list only
    after a further call (DeepSeek V3's GGUF template writes one call with no end of the list, two with it after the
    second): call 2 alone (`r1b`) and `r2`, each less the end of turn, share no ending, but do with `r2` cut at a
    tag's end after call 2's name; the text from there is the list's end. None where they share their ending."""
    end_of_turn = detect_end_of_turn(prober) or ""
    alone, both = (text.rstrip().removesuffix(end_of_turn).rstrip() if end_of_turn else text for text in (r1b, r2))
    if _on_to_tag_end(both, len(both) - _suffix_length(alone, both)) < len(both):  # they share a tag or more
        return None
    for match in re.finditer(r"<[^<>]+>", both[first_end:]):
        cut = first_end + match.end()
        shared = min(_suffix_length(alone, both[:cut], digits=True), cut - first_end)
        if name in both[cut - shared : cut]:
            end = both[cut:].strip()
            return (_on_to_tag_end(both, cut - shared), cut, end) if end else None
    return None


def _indexed(call: str, first_text: str) -> tuple[str, int]:
    """`call` (from the second call) with a number that is one less in the first call's text as `${index}`, and that
    number: the call's position in the list, as Kimi-style `functions.NAME:0` ids and Cohere's `"tool_call_id": "0"`
    write it. The first call's text starts at its opening, without the layout the call's template starts with."""
    layout = call[: len(call) - len(call.lstrip())]
    parts = re.split(r"(\$\{\w+\}|\d+)", call[len(layout) :])
    pattern = "".join(
        "(.*?)" if part.startswith("${") else r"(\d+)" if part.isdigit() else re.escape(part) for part in parts if part
    )
    match = re.fullmatch(pattern, first_text, re.DOTALL)
    if match is None:
        return call, 0
    out, first_index = [], 0
    kept = [part for part in parts if part]
    for part, held in zip(kept, _groups(kept, match), strict=True):
        if part.isdigit() and held is not None and held.isdigit() and int(held) == int(part) - 1:
            out.append(INDEX)
            first_index = int(held)
        else:
            out.append(part)
    return layout + "".join(out), first_index


def _groups(parts: list[str], match: re.Match[str]) -> list[str | None]:
    """The text each part of the call template matched in the first call (None for literal text)."""
    groups = iter(match.groups())
    return [next(groups) if part.startswith("${") or part.isdigit() else None for part in parts]


def _single(prober: Prober, r0: str, r1b: str, shape: Shape, content: str | None) -> CallFormat | None:
    """A template that renders one call per turn (two raise): call 2 alone is the call, with no list around it."""
    start, tail = _calls_span(r0, r1b, _data()["calls"][1]["function"]["name"])
    found = _template(r1b[start : len(r1b) - tail], _data()["calls"][1], shape)
    if found is None:
        return None
    call, form, parameter = found
    return CallFormat(
        begin="",
        call=call,
        separator=None,
        end="",
        arguments=form,
        parameter=parameter,
        keys=_keys(call, form),
        exact_values=_exact_values(prober, shape, form, parameter, content),
    )


def _calls_span(r0: str, r1: str, name: str) -> tuple[int, int]:
    """Where the calls of `r1` (the first named `name`) start, and how much follows them: `r1` against the same turn
    without calls."""
    content = _data()["content"]
    start = common_prefix_length(r0, r1)
    after_content = r1.rfind(content) + len(content) if content else -1
    if content in r1 and after_content <= r1.find(name, start):
        start = after_content  # the calls follow the content, which may be written another way beside calls
    start = _back_to_tag(r1, start)
    tail = len(r1) - _on_to_tag_end(r1, len(r1) - min(_suffix_length(r0, r1), len(r1) - start))
    return start, tail


def _back_to_tag(text: str, at: int) -> int:
    """`at`, or the start of the tag it cuts (`<|tool_call` of `<|tool_call_end|>`): a shared prefix of two renders
    ends inside a special token where two tokens start alike."""
    opening, closing = text.rfind("<", 0, at), text.rfind(">", 0, at)
    return opening if opening > closing and opening >= 0 else at


def _on_to_tag_end(text: str, at: int) -> int:
    """`at`, or the end of the tag it cuts (the mirror of `_back_to_tag`, for shared endings): only where a `<` before
    `at` is still open, so that a `>` of plain text (functionary's `>>>NAME`) is no tag's end."""
    if _back_to_tag(text, at) == at:
        return at
    closing, opening = text.find(">", at), text.find("<", at)
    return closing + 1 if closing >= 0 and (opening < 0 or closing < opening) else at


def _template(text: str, call: Mapping[str, Any], shape: Shape) -> tuple[str, ArgumentsForm, str | None] | None:
    """`text`, one rendered call, with its name, id and arguments replaced by placeholders."""
    arguments: dict[str, Any] = call["function"]["arguments"]
    found = _arguments(text, arguments)
    if found is None:
        return None
    (low, high), form, parameter = found
    name = call["function"]["name"]
    names = _outside(text, name, (low, high))
    if not names:
        return None
    # A name written twice (a message header's recipient and the invoke's name) is the same hole twice.
    spans = [*((at, at + len(name), NAME) for at in names), (low, high, ARGUMENTS)]
    id_at = _only(text, call["id"], (low, high))
    if id_at is not None:
        spans.append((id_at, id_at + len(call["id"]), ID))
    out, at = [], 0
    for span_low, span_high, placeholder in sorted(spans):
        out += [text[at:span_low], placeholder]
        at = span_high
    return "".join([*out, text[at:]]), form, parameter


def _only(text: str, sentinel: str, outside: Span) -> int | None:
    """Where `sentinel` appears once outside the arguments."""
    hits = _outside(text, sentinel, outside)
    return hits[0] if len(hits) == 1 else None


def _outside(text: str, sentinel: str, outside: Span) -> list[int]:
    """Where `sentinel` appears outside the arguments."""
    hits = [match.start() for match in re.finditer(re.escape(sentinel), text)]
    return [hit for hit in hits if not outside[0] <= hit < outside[1]]


def _arguments(text: str, arguments: dict[str, Any]) -> tuple[Span, ArgumentsForm, str | None] | None:
    for reader in (_as_json, _as_python):
        found = reader(text, arguments)
        if found is not None:
            return found[0], found[1], None
    quoted = _as_quoted(text, arguments)
    if quoted is not None:
        return quoted[0], "quoted", quoted[1]
    return _as_parameters(text, arguments)


def _as_quoted(text: str, arguments: dict[str, Any]) -> tuple[Span, str] | None:
    """An object of unquoted keys whose strings sit between a quoting token of the template's own, reading back as
    the arguments (`vocab.read_quoted`), and one string argument as written (`${key}:<|"|>${value}<|"|>`). The token
    is what the text has both right before a string argument's value and right after it."""
    key, value = next(((k, v) for k, v in arguments.items() if isinstance(v, str) and v), (None, None))
    if key is None or value is None or key not in text:
        return None
    key_at = text.index(key)
    value_at = text.find(value, key_at + len(key))
    if value_at < 0:
        return None
    middle, after = text[key_at + len(key) : value_at], text[value_at + len(value) :]
    quote = next((middle[at:] for at in range(len(middle)) if after.startswith(middle[at:])), "")
    if not quote.strip() or quote.strip() in ('"', "'"):
        return None
    for start in (at for at in range(key_at - 1, -1, -1) if text[at] == "{"):
        try:
            found, end = read_quoted(text, quote, start)
        except ValueError:
            continue
        if found == arguments:
            return (start, end), f"{KEY}{middle}{VALUE}{quote}"
    return None


def _as_json(text: str, arguments: dict[str, Any]) -> tuple[Span, ArgumentsForm] | None:
    """A JSON object equal to the arguments, or a JSON string holding one. Decoded only where one can start: an
    object's `{` before a key or its end, a string's `"` before what `lstrip` leaves a `{` (a `{`, a space or an
    escape)."""
    decoder = json.JSONDecoder()
    for match in _JSON_STARTS.finditer(text):
        at = match.start()
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if value == arguments:
            return (at, end), "json"
        if isinstance(value, str) and value.lstrip().startswith("{") and _loads(value) == arguments:
            return (at, end), "json_string"
    return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


_JSON_STARTS = re.compile(r'\{(?=\s*["}])|"(?=[{\\\s])')


def _as_python(text: str, arguments: dict[str, Any]) -> tuple[Span, ArgumentsForm] | None:
    """Keyword arguments, `key='value', other="value"`, reading back as the arguments."""
    first = next(iter(arguments))
    for match in re.finditer(rf"\b{re.escape(first)}\s*=", text):
        for end in range(match.end(), len(text) + 1):
            if text[end - 1 : end] in ("'", '"') and _python_kwargs(text[match.start() : end]) == arguments:
                return (match.start(), end), "python"
    return None


def _python_kwargs(text: str) -> dict[str, Any] | None:
    try:
        node = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or node.args:
        return None
    try:
        return {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords if keyword.arg}
    except ValueError:
        return None


def _as_parameters(text: str, arguments: dict[str, Any]) -> tuple[Span, ArgumentsForm, str | None] | None:
    """Two string arguments written the same way: the text around each key and value repeats, and the split of the
    text between them into one parameter's close and the next one's open is the one where the close ends a tag. A
    close may write the key again (`<${key}>${value}</${key}>`)."""
    if len(arguments) != 2 or not all(isinstance(value, str) for value in arguments.values()):
        return None
    (key1, value1), (key2, value2) = arguments.items()
    try:
        k1 = text.index(key1)
        v1 = text.index(value1, k1 + len(key1))
        k2 = text.index(key2, v1 + len(value1))
        v2 = text.index(value2, k2 + len(key2))
    except ValueError:
        return None
    middle = text[k1 + len(key1) : v1]
    if text[k2 + len(key2) : v2] != middle:
        return None
    before = text[:k1]
    between = text[v1 + len(value1) : k2].replace(key1, KEY, 1)
    after = text[v2 + len(value2) :].replace(key2, KEY, 1)
    splits = [at for at in range(len(between) + 1) if before.endswith(between[at:]) and after.startswith(between[:at])]
    if not splits:
        return None
    tagged = [at for at in splits if between[:at].endswith((">", "]", ")"))]
    keyed = [at for at in tagged if KEY in between[:at]]  # the close ends with the tag that writes the key again
    at = min(keyed) if keyed else max(tagged) if tagged else min(splits)
    close, opening = between[:at], between[at:]
    parameter = f"{opening}{KEY}{middle}{VALUE}{close}"
    return (k1 - len(opening), v2 + len(value2) + len(close.replace(KEY, key2))), "parameters", parameter


def _keys(call: str, form: ArgumentsForm) -> dict[str, str] | None:
    """The JSON keys of a call written as one JSON object: filled with marked values, the object is read back. The
    id's key is the one holding the request's id or, where the call writes none, a string holding its position
    (Cohere's `"tool_call_id": "0"`, which its tool results quote): the id the text writes."""
    if form not in ("json", "json_string"):
        return None
    filled = call.replace(NAME, "Zq7N").replace(ID, "Zq7I").replace(INDEX, "7")
    filled = filled.replace(ARGUMENTS, '"Zq7A"' if form == "json_string" else '{"Zq7A": 1}')
    found = _as_json_object(filled, "Zq7N")
    if found is None:
        return None
    wanted = {"name": "Zq7N", "arguments": "Zq7A" if form == "json_string" else {"Zq7A": 1}, "id": "Zq7I"}
    if ID not in call and INDEX in call:
        wanted["id"] = "7"
    keys = {role: key for role, value in wanted.items() for key, held in found.items() if held == value}
    return keys if "name" in keys and "arguments" in keys else None


def _as_json_object(text: str, name: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    for at in (match.start() for match in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if isinstance(value, dict) and name in value.values():
            return value
    return None


def _exact_values(
    prober: Prober, shape: Shape, form: ArgumentsForm, parameter: str | None, content: str | None
) -> bool:
    """The values call renders arguments that read back equal (its text located as the format says); with empty
    content, or None where only that renders calls."""
    call = _data()["values"]
    output = _call_render(prober, "calls.values", [call], shape, "" if content is not None else None)
    if output is None:
        return False
    arguments = call["function"]["arguments"]
    readers: dict[ArgumentsForm, Callable[[], bool]] = {
        "json": lambda: _as_json(output, arguments) is not None,
        "json_string": lambda: _as_json(output, arguments) is not None,
        "python": lambda: _as_python(output, arguments) is not None,
        "parameters": lambda: parameter is not None and _parameters_read_back(output, parameter, arguments),
        "quoted": lambda: _as_quoted(output, arguments) is not None,
    }
    return readers[form]()


def _parameters_read_back(output: str, parameter: str, arguments: dict[str, Any]) -> bool:
    """Every argument's parameter is in the output, a string value as is and others as JSON or Python literals (how
    a typed reader, transformers' included, reads them back from the tool's schema)."""
    pattern = re.compile(placeholder_pattern(parameter, PARAMETER_HOLES), re.DOTALL)
    read = {match["key"]: match["value"] for match in pattern.finditer(output)}
    return all(key in read and _value_of(read[key], value) == value for key, value in arguments.items())


PARAMETER_HOLES = {"key": r"(?P<key>[^<>\"=\n]+?)", "value": r"(?P<value>.*?)"}


def _value_of(raw: str, wanted: Any) -> Any:
    if isinstance(wanted, str):
        return raw
    loaded = _loads(raw)
    if loaded is not None or raw.strip() == "null":
        return loaded
    try:
        return ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        return raw
