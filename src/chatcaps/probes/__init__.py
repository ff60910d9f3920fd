"""Probes: each capability of a template decided by rendering sentinel conversations (docs/architecture.md).

`probe_caps` runs every detector against one compiled template. A probe that raises is recorded in
`Caps.probe_errors`; one that hits a sandbox limit stops detection with `RenderLimitError` (see `prober`), so the first
render comes before any other work. `strftime_now` is pinned to a fixed real date while it runs, so the same template
always gives the same Caps.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import orjson

from chatcaps.caps import Caps, Control, Effect, Reasoning, Roles, State, Tools
from chatcaps.engines import Renderer
from chatcaps.engines.builtins import pinned_clock
from chatcaps.probes.calls import after_reasoning, detect_call_format, detect_end_of_turn, refused
from chatcaps.probes.candidates import Candidates, find_candidates
from chatcaps.probes.content import detect_content
from chatcaps.probes.controls import Trials, detect_controls, propose
from chatcaps.probes.forms import Form, closing_of
from chatcaps.probes.prober import Conversation, Prober, conversation
from chatcaps.probes.prompt import base_conversation, emits_bos, generation_prompt
from chatcaps.probes.reasoning import (
    answer_header,
    channel_end,
    complete_markers,
    find_placement,
    form_under,
    history_of,
    history_probe,
    marker_pairs,
    markers_from_placement,
    markers_from_prefill,
    markers_from_prompts,
    passes_through,
    prompt_alternatives,
    proposed_forms,
    skipped_block_header,
    stripping_pair,
)
from chatcaps.probes.roles import detect_roles
from chatcaps.probes.tools import detect_tools
from chatcaps.probes.variables import caller_variables
from chatcaps.vocab import Markers, state_of

PINNED_NOW = datetime(2026, 1, 15, 9, 30)
"""A real date (a Thursday): templates that look the weekday or month up in a table still render."""

__all__ = ["PINNED_NOW", "probe_caps"]


def probe_caps(renderer: Renderer, *, bos_token: str = "", eos_token: str = "") -> Caps:
    prober = Prober(renderer, bos_token=bos_token, eos_token=eos_token)
    with pinned_clock(PINNED_NOW):
        base = base_conversation(prober)
        candidates = find_candidates(renderer.source, name=renderer.name, tree=renderer.source_tree())
        roles = detect_roles(prober)
        tools = detect_tools(prober)
        tools = replace(tools, call_format=detect_call_format(prober, tools, candidates.containers))
        content = detect_content(prober)
        prompt = generation_prompt(prober, base) or ""
        if content.requires_typed:  # string turns showed nothing: ask again in text blocks
            roles = detect_roles(prober, typed=True)
        reasoning = _reasoning(prober, candidates, roles, tools, prompt)
        if reasoning.format == "none" and tools.call_format is not None and not tools.calls and refused(prober):
            # The calls were read off renders that let the template change its data (`detect_call_format`): a
            # template that writes reasoning only beside calls (Kimi-K2-Thinking) shows its markers there alone. A
            # user's render writes no call (the polyfill makes them text), so no past turn's reasoning shows: history
            # "none", whatever the mutable renders show.
            mutable = prober.mutable()
            found = _reasoning(mutable, candidates, roles, detect_tools(mutable), prompt)
            reasoning = replace(found, history="none")
        calls = after_reasoning(tools.call_format, reasoning.start_marker, reasoning.end_marker)
        tools = replace(tools, call_format=calls)
        caps = Caps(
            template_sha256="",
            engine=renderer.engine,
            roles=roles,
            content=content,
            tools=tools,
            reasoning=reasoning,
            generation_prompt=prompt,
            end_of_turn=_end_of_turn(prober, tools),
            emits_bos=emits_bos(prober, base),
            template_variables=caller_variables(prober, renderer.source, candidates.variables),
        )
    tools = replace(caps.tools, requires_list=prober.needs_tool_list)
    return Caps(**{**caps.__dict__, "tools": tools, "probe_errors": prober.errors})


def _end_of_turn(prober: Prober, tools: Tools) -> str | None:
    """`detect_end_of_turn`; with no tools passed where it finds none with them and the calls were found only so
    (their definitions raise)."""
    found = detect_end_of_turn(prober)
    if found is None and tools.call_format is not None and not tools.definitions:
        return detect_end_of_turn(prober, unlisted=True)
    return found


def _reasoning(prober: Prober, candidates: Candidates, roles: Roles, tools: Tools, opening: str) -> Reasoning:
    """Format and markers first (from rendered reasoning, else the generation prompt, else stripped inline text),
    then history and controls, which are read through those markers; last, where reasoning is one channel among
    several, its end marker cut to the channel's end and whether each channel is a message of its own
    (`channel_end`)."""
    forms = proposed_forms(candidates)
    placement = find_placement(prober, tools, forms)
    markers = markers_from_placement(placement) if placement else Markers()
    prefill = Markers() if placement else markers_from_prefill(prober)
    proposals = propose(candidates)
    prompt = conversation("system" if roles.system else "user")
    if not (markers.start and markers.end):
        prompt_trials = Trials(prober, prompt, None, system=roles.system)
        outputs = [
            trial.prompt for candidate in prompt_trials.telling(proposals) for trial in prompt_trials.run(candidate)
        ]
        baseline = prompt_trials.baseline().prompt
        if placement:
            markers = complete_markers(markers, placement, prompt_alternatives(baseline, outputs))
        else:
            markers = markers_from_prompts(baseline, outputs)
    pair = stripping_pair(prober, marker_pairs(markers or prefill, candidates))
    if not markers and pair:
        markers = Markers(*pair)
    inferred = False
    if not markers and prefill.start and (closing := prefill.end or closing_of(prefill.start)):
        # A generation prompt that opens a tag: reasoning closed as the prompt or the template's own text closes it,
        # else by the tag's counterpart, inferred (the template never reads, writes or closes reasoning elsewhere).
        inferred = prefill.end is None and closing not in prober.renderer.source
        markers = Markers(prefill.start, closing)

    form = placement.form if placement else None
    if form is None and markers:
        end = markers.end or closing_of(markers.start or "")
        if markers.start and end:
            form = Form("inline", markers.start, end)
            placement = find_placement(prober, tools, [form])
            if pair is None and (placement is None or passes_through(prober, form)):
                form, placement = None, None  # the template neither writes nor cuts the markers in content
    history = None
    system = conversation("system")[:1] if roles.system else None
    if form is not None:
        history = history_probe(
            prober,
            form,
            tools,
            content=placement.with_content if placement else True,
            absent=placement.absent_content if placement else False,
            system=system,
        )

    def state(output: str | None) -> State:
        return state_of(output, markers) if markers else ("free" if output is not None else "none")

    controls = detect_controls(
        proposals,
        Trials(prober, prompt, history, system=roles.system),
        state,
        history_of,
        text_switches=not (placement or markers),
        markers=tuple(marker for marker in (markers.start, markers.end) if marker),
    )
    read = form.name if form is not None and form.name != "inline" else None
    controls = tuple(_forms_by_value(prober, tools, forms, control, read, system) for control in controls)
    if markers.start and not markers.end and not (placement or pair or controls or prefill):
        # One word in which some kwarg's prompt differs (a classifier's config naming a risk), never written, closed
        # or switched as a block: no marker.
        markers = Markers()
    supported = bool(placement or markers or controls)
    ends, headers, channel_style = channel_end(prober, tools, placement, markers, opening)
    headers = headers or answer_header(prober, markers, opening) or skipped_block_header(prober, ends, controls)
    default_state = state(prober.render("generation_prompt", conversation("user"), add_generation_prompt=True))
    return Reasoning(
        format=form.name if form else "none",
        requires_tools=placement.requires_tools if placement else False,
        with_content=placement.with_content if placement else False,
        without_content=placement.without_content if placement else False,
        start_marker=markers.start,
        end_marker=ends.end,
        end_marker_inferred=inferred,
        content_headers=headers,
        history=history_of(history.render(prober, "reasoning.history")) if history else "none",
        strips_inline=pair is not None,
        controls=controls,
        default_state=default_state if supported else "none",
        channel_style=channel_style,
    )


def _forms_by_value(
    prober: Prober,
    tools: Tools,
    forms: tuple[Form, ...],
    control: Control,
    read: str | None,
    system: Conversation | None,
) -> Control:
    """A toggle whose other values make the template read past reasoning from a field or block it does not read by
    default: the form (and the history rule it follows) recorded in those values' effects, so the polyfill writes
    reasoning where the render in that state reads it."""
    if control.role != "toggle" or control.kind == "system_flag":
        return control
    effect = dict(control.effect)
    for value in control.values:
        if value == control.default:
            continue
        found = form_under(prober, tools, forms, {control.name: value}, system=system)
        if found is not None and found[0].name != read:
            key = orjson.dumps(value).decode()
            effect[key] = Effect(effect[key].state, found[1], found[0].name)
    return replace(control, effect=effect)
