"""Reasoning: the form a template reads it from, the markers it writes around it, which past turns keep it, whether
inline `<think>` text is stripped, and the state the generation prompt leaves the model in."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from chatcaps.caps import Control, History, Tools
from chatcaps.probes.candidates import Candidates
from chatcaps.probes.forms import (
    NO_REASONING,
    PROBED_FORMS,
    Form,
    closing_of,
    leading_closing_tag,
    opening_of,
    place,
    split_block,
)
from chatcaps.probes.prober import Conversation, Prober, conversation, probe_tools
from chatcaps.probes.text import ONE_TAG, differing_prefix, differing_suffix
from chatcaps.probes.tools import tool_call_shape, with_arguments
from chatcaps.vocab import BLOCK_FORMS, FIELD_FORMS, Markers

REASONS = ("Zq7Reason1", "Zq7Reason2", "Zq7Reason3", "Zq7Reason4")
"""R1: a plain turn before the last user turn; R2, R3: tool-call turns after it; R4 (tool loops only): a tool-call
turn before it."""
USER1, ANSWER1 = "Zq7User1", "Zq7Answer1"

_POSITIONS = (("reasoning_last", False), ("reasoning_past", True), ("reasoning_tool", True))
"""Probe conversations for the format, and whether each ends with a generation prompt."""


@dataclass(frozen=True)
class Placement:
    """Where a reasoning sentinel rendered, for one form."""

    form: Form
    with_content: bool
    without_content: bool
    requires_tools: bool
    output: str | None
    """A render showing the sentinel next to an answer (None when it only shows without one)."""
    bare_output: str | None
    """A render showing the sentinel with no answer."""
    baseline: str | None
    """`output`'s conversation with the reasoning left out."""
    absent_content: bool = False
    """The template refused an empty content beside reasoning and rendered the turn with no content key."""


@dataclass(frozen=True)
class HistoryProbe:
    """The conversation that tells which past turns keep their reasoning: a tool loop when tool calls render."""

    messages: Conversation
    tools: list[dict[str, Any]] | None
    add_generation_prompt: bool

    def render(self, prober: Prober, probe: str, kwargs: Mapping[str, Any] | None = None) -> str | None:
        return prober.render(
            probe, self.messages, tools=self.tools, add_generation_prompt=self.add_generation_prompt, kwargs=kwargs
        )


def history_probe(
    prober: Prober,
    form: Form,
    tools: Tools,
    *,
    content: bool,
    absent: bool = False,
    system: Conversation | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> HistoryProbe:
    """Reasoning R1..R3 in successive assistant turns, each in `form`, after an optional system turn: a tool loop
    where tool calls render. Where the template refuses an answer beside reasoning on a tool-call turn, those turns
    carry reasoning alone (the refusal recorded, see `Prober.render_shapes`)."""
    lead = system or []
    if not (tools.calls and tools.responses):
        chat = place(conversation("history_chat"), form, content=content, absent=absent)
        return HistoryProbe([*lead, *chat], None, False)
    messages = [
        *lead,
        *place(
            with_arguments(conversation("history_tools"), tool_call_shape(tools)), form, content=content, absent=absent
        ),
    ]
    shapes = [(_ANSWER_SHAPE, messages)]
    if content:
        alone = orjson.loads(orjson.dumps(messages))
        for message in alone:
            if message.get("tool_calls") and message["role"] == "assistant":
                del message["content"]
        shapes.append(("reasoning alone on tool-call turns", alone))
    index, _ = prober.render_shapes(
        "reasoning.history", shapes, tools=probe_tools(), add_generation_prompt=True, kwargs=kwargs
    )
    return HistoryProbe(shapes[max(index, 0)][1], probe_tools(), True)


def history_of(output: str | None) -> History:
    """Read which reasoning sentinels survived in a `history_probe` render."""
    if output is None:
        return "none"
    if REASONS[0] in output:
        return "all"
    if REASONS[3] in output:
        return "tool_calls"
    if REASONS[1] in output:
        return "after_last_user"
    if REASONS[2] in output:
        return "last_assistant"
    return "none"


def form_under(
    prober: Prober, tools: Tools, forms: Iterable[Form], kwargs: Mapping[str, Any], *, system: Conversation | None
) -> tuple[Form, History] | None:
    """The form past reasoning is read from with `kwargs` passed (a control held at one value), and the history rule
    it follows there; None when no form renders."""
    placement = find_placement(prober, tools, forms, kwargs)
    if placement is None:
        return None
    history = history_probe(
        prober,
        placement.form,
        tools,
        content=placement.with_content,
        absent=placement.absent_content,
        system=system,
        kwargs=kwargs,
    )
    return placement.form, history_of(history.render(prober, "reasoning.history", kwargs))


def proposed_forms(candidates: Candidates) -> tuple[Form, ...]:
    """The forms worth probing: each field and block type the source names (a read, a comparison, any string
    constant), or every form where it walks a mapping's items and may print fields it never names. A form the
    template cannot name cannot render its sentinel except inside a printed message, which is no reasoning."""
    named = {*candidates.message_fields, *candidates.block_types, *candidates.literals}
    return tuple(
        Form(name)
        for name in PROBED_FORMS
        if candidates.reads_items or (BLOCK_FORMS[name][0] if name in BLOCK_FORMS else name) in named
    )


def find_placement(
    prober: Prober, tools: Tools, forms: Iterable[Form], kwargs: Mapping[str, Any] | None = None
) -> Placement | None:
    """The first of `forms` whose reasoning sentinel renders in a last turn, a past turn or a tool-call turn (with
    `kwargs` passed, for the form under a control's value)."""
    shape = tool_call_shape(tools)
    bases = {name: with_arguments(conversation(name), shape) for name, _ in _POSITIONS}  # `place` copies them
    tool_list = probe_tools()  # shared by every render: templates get tools read-only on both engines
    for form in forms:
        seen: dict[tuple[str, bool], str] = {}
        absent = False
        for name, add_generation_prompt in _POSITIONS:
            base = bases[name]
            call_tools = tool_list if name == "reasoning_tool" else None
            outputs, absent_here = _render_forms(prober, form, base, call_tools, add_generation_prompt, kwargs)
            for content, output in zip((True, False), outputs, strict=True):
                if _sighting(prober, output, form, base, content, call_tools, add_generation_prompt, kwargs):
                    seen[(name, content)] = output  # type: ignore[assignment]
                    absent = absent or (absent_here and not content)
        if not seen:
            continue
        with_answer = next(((name, True) for name, _ in _POSITIONS if (name, True) in seen), None)
        baseline = None
        if with_answer is not None:
            name, agp = next(position for position in _POSITIONS if position[0] == with_answer[0])
            baseline = prober.render(
                f"reasoning.{form.name}",
                place(bases[name], NO_REASONING),
                tools=tool_list if name == "reasoning_tool" else None,
                add_generation_prompt=agp,
                kwargs=kwargs,
            )
        return Placement(
            form=form,
            with_content=any(content for _, content in seen),
            without_content=any(not content for _, content in seen),
            requires_tools=all(name == "reasoning_tool" for name, _ in seen),
            output=seen[with_answer] if with_answer else None,
            bare_output=next((output for (_, content), output in seen.items() if not content), None),
            baseline=baseline,
            absent_content=absent,
        )
    return None


_ANSWER_SHAPE = "reasoning with content"
_BARE_SHAPES = ("reasoning alone, empty content", "reasoning alone, no content")


def _render_forms(
    prober: Prober,
    form: Form,
    base: Conversation,
    tools: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    kwargs: Mapping[str, Any] | None,
) -> tuple[tuple[str | None, str | None], bool]:
    """One position's renders of `form`: with an answer, and without one (an empty content, or, where the template
    refuses that and the form is a field, no content key at all). A shape the template refuses is recorded naming
    the shape that rendered instead. Returns the two outputs and whether the bare one left the content out."""
    probe = f"reasoning.{form.name}"
    answer = prober.attempt(
        probe, place(base, form), tools=tools, add_generation_prompt=add_generation_prompt, kwargs=kwargs
    )
    shapes = [(_BARE_SHAPES[0], place(base, form, content=False))]
    if form.name in FIELD_FORMS:
        shapes.append((_BARE_SHAPES[1], place(base, form, content=False, absent=True)))
    index, bare = prober.render_shapes(
        probe, shapes, tools=tools, add_generation_prompt=add_generation_prompt, kwargs=kwargs
    )
    if answer.output is None and bare is not None:
        prober.record(probe, answer.error or "", _ANSWER_SHAPE, shapes[index][0])
    elif answer.error is not None and answer.fresh:
        prober.record(probe, answer.error)
    return (answer.output, bare), index == 1


def _sighting(
    prober: Prober,
    output: str | None,
    form: Form,
    base: Conversation,
    content: bool,
    tools: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    kwargs: Mapping[str, Any] | None = None,
) -> bool:
    """The reasoning sentinel renders as reasoning: not inside a printed repr of the message, and, for a block form,
    differently from a plain text block holding the same words (templates that print any block's "text" do not read
    reasoning blocks)."""
    if output is None or REASONS[0] not in output or any(f"{q}{REASONS[0]}{q}" in output for q in "'\""):
        return False
    if form.name not in BLOCK_FORMS:
        return True
    as_text = place(base, Form("thoughts_block"), content=content)
    for message in as_text:
        if isinstance(message.get("content"), list):
            message["content"][0] = {"type": "text", "text": message["content"][0]["text"]}
    plain = prober.render(
        f"reasoning.{form.name}", as_text, tools=tools, add_generation_prompt=add_generation_prompt, kwargs=kwargs
    )
    return plain != output


def markers_from_placement(placement: Placement) -> Markers:
    """Markers read around a rendered reasoning sentinel: the end is what separates it from the answer; the start is
    the opening tag that end implies, or else what the reasoning added before itself compared with the baseline."""
    output = placement.output or placement.bare_output
    if output is None:
        return Markers()
    at = output.index(REASONS[0])
    user_at = output.rfind(USER1, 0, at)
    before = output[user_at + len(USER1) if user_at >= 0 else 0 : at]
    after = output[at + len(REASONS[0]) :]
    base_before = None
    if placement.output and placement.baseline and USER1 in placement.baseline:
        base_at = placement.baseline.index(USER1) + len(USER1)
        answer_at = placement.baseline.find(ANSWER1, base_at)
        base_before = placement.baseline[base_at : answer_at if answer_at >= 0 else None]
    if placement.output:
        between = after[: after.index(ANSWER1)] if ANSWER1 in after else ""
        end = (differing_prefix(base_before, between).strip() if base_before is not None else "") or between.strip()
    else:
        end = leading_closing_tag(after) or ""
    start = opening_of(end) if end else None
    if start is None or not before.rstrip().endswith(start):
        start = differing_suffix(base_before, before).strip() if base_before is not None else None
    return Markers(start or None, end or None)


def channel_end(
    prober: Prober, tools: Tools, placement: Placement | None, markers: Markers, prompt: str
) -> tuple[Markers, tuple[str, ...], bool]:
    """Reasoning as one channel among several (issue 17, mechanism 6): the end marker is what an answer and a tool
    call both write after the reasoning, and the rest of the answer's end marker is the header opening its channel.

    The end found next to an answer (`<|end|><|start|>assistant<|channel|>final<|message|>`) is compared with what a
    tool-call turn writes after the same reasoning (`<|end|><|start|>assistant to=functions.NAME...`); where they part
    before the end marker's end, the shared text is the end. Where that shared text ends with the generation prompt
    (each channel a message of its own, opened as the prompt opens one), the prompt belongs to the next block.
    Returns the markers, the content headers (none where the end marker is what both write) and whether each channel
    is a message of its own (`Reasoning.channel_style`)."""
    end = markers.end
    if placement is None or not end:
        return markers, (), False
    if placement.output is None or not tools.calls:
        return markers, content_opener(prober, placement, end), False
    base = with_arguments(conversation("reasoning_tool"), tool_call_shape(tools))
    # The renders `find_placement` made already (memoized): with an answer, else with reasoning alone.
    renders = (
        prober.attempt(
            f"reasoning.{placement.form.name}", place(base, placement.form, content=content), tools=probe_tools()
        )
        for content in (True, False)
    )
    output = next((found.output for found in renders if found.output is not None), None)
    if output is None or REASONS[0] not in output:
        return markers, (), False
    after = output[output.index(REASONS[0]) + len(REASONS[0]) :].lstrip()
    shared = end[: len(end) - len(differing_suffix(after, end))]
    opening = prompt.strip()
    messages = bool(opening) and shared.endswith(opening) and len(shared) > len(opening)
    if messages:
        shared = shared[: -len(opening)]
    shared = shared.strip()
    if shared == end and (header := message_header(placement.output, end, opening, after)):
        return markers, (header,), True
    if not shared or shared == end:
        return markers, content_opener(prober, placement, end), False
    return Markers(markers.start, shared), (end[len(shared) :].strip(),), messages


def message_header(answer: str, end: str, opening: str, call: str) -> str | None:
    """Where the end marker is all that an answer and a tool call write alike after the reasoning, and both go on
    with the generation prompt (muse-glimmer: `<|eom|><|start|>assistant to=user<|message|>answer` and
    `<|eom|><|start|>assistant to=NAME<|message|>...`): each channel is a message of its own, and the answer's
    header is what the answer writes from the prompt on (its recipient included); None otherwise. `answer` is a render
    with reasoning and an answer, `call` what a tool-call turn writes after the same reasoning."""
    if not opening or not call.startswith(end) or not call[len(end) :].lstrip().startswith(opening):
        return None
    after = answer[answer.index(REASONS[0]) + len(REASONS[0]) :]
    if ANSWER1 not in after or not after.lstrip().startswith(end):
        return None
    header = after[after.index(end) + len(end) : after.index(ANSWER1)].strip()
    return header if header.startswith(opening) and header != opening else None


def content_opener(prober: Prober, placement: Placement, end: str) -> tuple[str, ...]:
    """The text a template writes between the reasoning's end marker and the answer where it is more than layout
    (`<|START_TEXT|>` of `<|END_THINKING|><|START_TEXT|>answer`): the answer's header, grammar like a channel's, so
    the reply side keeps it out of `content`. Read off a plain turn with reasoning and an answer."""
    output = prober.render(f"reasoning.{placement.form.name}", place(conversation("reasoning_last"), placement.form))
    if output is None or REASONS[0] not in output or ANSWER1 not in output:
        return ()
    after = output[output.index(REASONS[0]) + len(REASONS[0]) :]
    if end not in after or after.index(end) > after.index(ANSWER1):
        return ()
    opener = after[after.index(end) + len(end) : after.index(ANSWER1)].strip()
    return (opener,) if opener and ONE_TAG.fullmatch(opener) else ()


_WORD_LINE = re.compile(rf"\w+\n(?:{ONE_TAG.pattern})?")
"""A header that is one word on a line of its own, and the tag it may open the answer with (functionary's recipient:
v3.2's `all\n`, v2.2's `all\n<|content|>`)."""


def answer_header(prober: Prober, markers: Markers, prompt: str) -> tuple[str, ...]:
    """The tag a template writes between an assistant turn's opening and its answer (`<|START_RESPONSE|>` of
    `<|CHATBOT_TOKEN|><|START_RESPONSE|>answer`), or the word line it writes there after the whole generation prompt
    (functionary's `all\n` of `>>>all\nanswer`, the recipient a call's name takes the place of): grammar like
    `content_opener`'s header, found where no render puts reasoning beside an answer (a template that shows reasoning
    only beside tool calls, or none).

    Read off the renders the roles and the generation prompt probes made: a plain turn in history against the
    generation prompt after the same user turn. Where the two part, the history turn writes exactly one opening tag
    and the prompt wrote the turn's opening before it (it writes something else there, or it ends there with the
    generation prompt); the tag is not one the prompt writes (the role header itself, in a template that ends a user
    turn differently before an answer) nor a reasoning marker (an empty block in history, `<think></think>`). A word
    line counts only where the history turn writes the prompt whole before it: the model writes it after the prompt
    (a word is no special token, so the reply side reads it only at the message's start)."""
    history = prober.render("roles.user_assistant", conversation("user_assistant"), add_generation_prompt=True)
    opened = prober.render("generation_prompt", conversation("user"), add_generation_prompt=True)
    if history is None or opened is None or USER1 not in opened:
        return ()
    user, answer = history.find(USER1), history.find(ANSWER1)
    if user < 0 or answer < user:
        return ()
    header = history[user + len(USER1) : answer]
    tail = opened[opened.index(USER1) + len(USER1) :]
    parted = differing_suffix(tail, header)
    tag, shared = parted.strip(), header[: len(header) - len(parted)].rstrip()
    opens_turn = differing_suffix(header, tail).strip() or (prompt.strip() and shared.endswith(prompt.strip()))
    if header.startswith(tail) and _WORD_LINE.fullmatch(header[len(tail) :]):
        return (header[len(tail) :],)
    if not opens_turn or not ONE_TAG.fullmatch(tag) or tag.startswith(("</", "[/")):
        return ()
    return () if tag in tail or tag in (markers.start, markers.end) else (tag,)


def skipped_block_header(prober: Prober, markers: Markers, controls: Iterable[Control]) -> tuple[str, ...]:
    """The answer's own opening where the end marker ends with it (Kimi-K3's `<|open|>response<|sep|>` of
    `<|close|>think<|sep|><|open|>response<|sep|>`): what the generation prompt writes in place of the opened block
    where a toggle turns reasoning off. A model that skips its thinking writes that opening itself, so it is a content
    header, grammar like `answer_header`'s. Read off the prompt under each toggle value against the default prompt,
    after the same user turn."""
    if not (markers.start and markers.end):
        return ()
    default = prober.render("generation_prompt", conversation("user"), add_generation_prompt=True)
    for control in controls:
        if control.role != "toggle" or control.kind == "system_flag":
            continue
        for value in control.values:
            kwargs = {**control.held, control.name: value}
            output = prober.render("reasoning.skipped", conversation("user"), add_generation_prompt=True, kwargs=kwargs)
            if default is None or output is None:
                continue
            opening = differing_suffix(_after_user(default), _after_user(output)).strip()
            if opening and opening != markers.end and markers.end.endswith(opening):
                return (opening,)
    return ()


def complete_markers(markers: Markers, placement: Placement, alternatives: Iterable[str]) -> Markers:
    """Fill a marker the rendered reasoning left unknown from the generation prompts' alternative tails (see
    `prompt_alternatives`), where the render shows one right next to the reasoning sentinel. A closed block the
    prompts show as one piece ("<|A|><|B|>") is split where the render puts the reasoning inside it."""
    output = placement.output or placement.bare_output
    if (markers.start and markers.end) or output is None:
        return markers
    at = output.index(REASONS[0])
    before, after = output[:at].rstrip(), output[at + len(REASONS[0]) :].lstrip()
    start, end = markers.start, markers.end
    for text in alternatives:
        for cut in range(1, len(text)):
            head, tail = text[:cut].strip(), text[cut:].strip()
            fits = head and tail and start in (None, head) and end in (None, tail)
            if fits and before.endswith(head) and after.startswith(tail):
                return Markers(head, tail)
    for text in alternatives:
        start = start or _ending_with(before, text)
    return Markers(start, end)


def _ending_with(before: str, marker: str) -> str | None:
    """`marker` as the text right before the sentinel shows it: itself, or itself and one more tag, when comparing
    prompts cut a shared closing token off both alternatives ("<|open|>think" of "<|open|>think<|sep|>")."""
    if before.endswith(marker):
        return marker
    at = before.rfind(marker)
    return before[at:] if at >= 0 and ONE_TAG.fullmatch(before[at + len(marker) :]) else None


def markers_from_prefill(prober: Prober) -> Markers:
    """Markers in what the generation prompt writes beyond the header an assistant turn starts with in history."""
    history = prober.render("reasoning.prefill", conversation("user_assistant"))
    prompt = prober.render("reasoning.prefill", conversation("user"), add_generation_prompt=True)
    if history is None or prompt is None or USER1 not in prompt:
        return Markers()
    user, answer = history.find(USER1), history.find(ANSWER1)
    if user < 0 or answer < user:  # a template that shows only the last turn, or reorders them
        return Markers()
    header = history[user + len(USER1) : answer]
    prefill = differing_suffix(header, prompt[prompt.index(USER1) + len(USER1) :])
    if prefill.strip() and prefill.strip() in header:  # the header itself, spaced differently or written twice
        return Markers()
    return _block_markers(prefill, "")


def markers_from_prompts(baseline: str | None, outputs: Iterable[str | None]) -> Markers:
    """Markers in how the generation prompt differs between control values (e.g. an open vs a closed block): the
    text after the last user turn, compared token by token."""
    found = Markers()
    for one, other in _prompt_differences(baseline, outputs):
        markers = _block_markers(one, other)
        if markers.start and markers.end:
            return markers
        found = found or markers
    return found


def prompt_alternatives(baseline: str | None, outputs: Iterable[str | None]) -> list[str]:
    """The token-aligned parts in which generation prompts differ from the baseline after the last user turn, both
    sides of each difference (e.g. "<think>" and "</think>"), in order of first appearance."""
    found: list[str] = []
    for pair in _prompt_differences(baseline, outputs):
        for text in (side.strip() for side in pair):
            if text and "Zq7" not in text and text not in found:
                found.append(text)
    return found


def _prompt_differences(baseline: str | None, outputs: Iterable[str | None]) -> Iterator[tuple[str, str]]:
    """For each output, the differing middle of (its tail, the baseline's tail) after the last user turn."""
    if baseline is None:
        return
    base = _after_user(baseline)
    for output in outputs:
        if output is None:
            continue
        tail = _after_user(output)
        ours, theirs = differing_suffix(base, tail), differing_suffix(tail, base)
        yield differing_prefix(theirs, ours), differing_prefix(ours, theirs)


def _after_user(output: str) -> str:
    at = output.rfind(USER1)
    return output[at + len(USER1) :] if at >= 0 else output


def _block_markers(one: str, other: str) -> Markers:
    """Markers in two alternative tails: an opened or closed block on one side ("<think>", "<think></think>"), or
    an opening tag on one side and its closing tag on the other (a prompt ending "<think>" vs one ending "</think>")."""
    if "Zq7" in one + other:
        return Markers()
    for text, alternative in ((one, other), (other, one)):
        start, end = split_block(text)
        if start and end:
            return Markers(start, end)
        alternative_end = alternative.strip()
        if start and alternative_end and opening_of(alternative_end) == start:
            return Markers(start, alternative_end)
    start = next((split_block(text)[0] for text in (one, other) if text.strip()), None)
    if start and len(start.split()) == 1 and not start.startswith(("</", "[/")):
        return Markers(start, None)
    return Markers()


def marker_pairs(markers: Markers, candidates: Candidates) -> list[tuple[str, str]]:
    """Opening/closing pairs to try as inline reasoning: the markers found so far, then closing-tag-shaped strings
    the template's source contains (proposals; a render decides)."""
    pairs = []
    if markers.start and (markers.end or closing_of(markers.start)):
        pairs.append((markers.start, markers.end or closing_of(markers.start) or ""))
    elif markers.end and opening_of(markers.end):
        pairs.append((opening_of(markers.end) or "", markers.end))
    for literal in candidates.literals:
        closing = literal.strip()
        opening = opening_of(closing) if closing == leading_closing_tag(closing) else None
        if opening and (opening, closing) not in pairs:
            pairs.append((opening, closing))
    return pairs


NEUTRAL_MARKERS = ("Zq7Open", "Zq7Close")
"""Words that stand in for a pair of markers when testing whether a template treats them as anything but text."""


def passes_through(prober: Prober, form: Form) -> bool:
    """Whether the template prints inline reasoning as any other text: with the markers swapped for neutral words,
    the render is the same once they are swapped back (in a last and in a past turn). Such a template neither writes
    nor cuts the markers, so it supports no reasoning format: `<think>` surviving in content is not support."""
    neutral = Form("inline", *NEUTRAL_MARKERS)
    for name, add_generation_prompt in _POSITIONS[:2]:
        base = conversation(name)
        marked = prober.render("reasoning.inline", place(base, form), add_generation_prompt=add_generation_prompt)
        plain = prober.render("reasoning.inline", place(base, neutral), add_generation_prompt=add_generation_prompt)
        if plain is None and marked is None:
            continue
        if plain is None or marked != plain.replace(neutral.start, form.start).replace(neutral.end, form.end):
            return False
    return True


def stripping_pair(prober: Prober, pairs: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """The first pair for which "<open>R<close>C" in a past turn's content renders as C alone."""
    for start, end in pairs:
        messages = place(conversation("reasoning_past"), Form("inline", start, end))
        output = prober.render("reasoning.strips_inline", messages, add_generation_prompt=True)
        if output is not None and ANSWER1 in output and REASONS[0] not in output:
            return start, end
    return None
