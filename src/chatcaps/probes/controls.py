"""Controls: every template variable or system-text flag that changes reasoning, found by rendering each candidate
value and comparing with the render where nothing is passed.

Candidates come from the template's source (variables it reads, constants it compares them with, strings it looks for
in message text); only a render decides. A value "makes a difference" when the prompt or the history render changes;
the candidate is a reasoning control when that difference moves the generation state or which past reasoning survives,
or, for text-only differences, when the values are effort levels, a budget, or a switch (not a value printed verbatim)
where the template has no other reasoning mechanism or where the text it changes speaks of reasoning.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import orjson

from chatcaps.caps import JSON, Control, ControlKind, ControlRole, Effect, FlagTurn, History, State
from chatcaps.probes.candidates import Candidates
from chatcaps.probes.prober import Conversation, Prober
from chatcaps.probes.reasoning import HistoryProbe
from chatcaps.vocab import EFFORT_LEVELS, TIERS, moves_state

PROBE_BUDGET = 4096
_STATE_RANK: Mapping[str, int] = MappingProxyType({"closed": 0, "none": 1, "free": 1, "forced_open": 2})


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: ControlKind
    values: tuple[JSON, ...]
    scale: bool = False
    """The template compares it with an effort word (beyond "none"): an effort candidate even if only text changes."""
    whole: bool = False
    """A flag the template compares a message's whole content with: tried as the turn's entire text."""


@dataclass(frozen=True)
class Trial:
    """One candidate value's renders: the prompt (ending in the generation prompt) and the history conversation."""

    value: JSON
    prompt: str | None
    history: str | None
    turn: FlagTurn = "system"
    """For a flag: the turn it went into."""


def propose(candidates: Candidates) -> list[Candidate]:
    """The candidates and the values to try for each, typed by the constants the template compares them with."""
    proposals = []
    for name in candidates.variables:
        compared = candidates.values.get(name, ())
        strings = [value for value in compared if isinstance(value, str)]
        numbers = [value for value in compared if isinstance(value, int | float) and not isinstance(value, bool)]
        if strings:
            scale = any(value in EFFORT_LEVELS[1:] for value in strings)
            if any(value in EFFORT_LEVELS for value in strings):  # the tiers the reasoning intent speaks, too
                strings += [level for level in TIERS if level not in strings]
            proposals.append(Candidate(name, "enum", tuple(strings), scale))
        elif numbers:
            proposals.append(Candidate(name, "int", tuple(dict.fromkeys([*numbers, PROBE_BUDGET]))))
        else:
            proposals.append(Candidate(name, "bool", (True, False)))
    proposals.extend(Candidate(flag, "system_flag", (True,)) for flag in candidates.flags)
    proposals.extend(Candidate(flag, "system_flag", (True,), whole=True) for flag in candidates.whole_flags)
    return proposals


FLAGGED_TEXTS = ("Zq7System1", "Zq7User1")
"""The probe texts a flag is appended to: the system turn's, or, with no system role, the user turn's."""


def with_flag(messages: Conversation, flag: str, *, system: bool, whole: bool = False) -> Conversation:
    """`messages` with `flag` appended to the system turn (or, with no system role, to the last user turn); `whole`:
    the flag as that turn's entire text."""
    flagged = orjson.loads(orjson.dumps(messages))
    roles = [message["role"] for message in flagged]
    index = 0 if system and roles[0] == "system" else len(roles) - 1 - roles[::-1].index("user")
    flagged[index]["content"] = flag if whole else f"{flagged[index]['content']} {flag}"
    return flagged  # type: ignore[no-any-return]


class Trials:
    """Renders a candidate's values against one prompt conversation and one history probe (memoised by the Prober)."""

    def __init__(
        self,
        prober: Prober,
        prompt: Conversation,
        history: HistoryProbe | None,
        *,
        system: bool,
        fixed: Mapping[str, JSON] | None = None,
    ) -> None:
        self.prober = prober
        self.prompt = prompt
        self.history = history
        self.history_messages = history.messages if history else []
        self.system = system
        self.fixed: Mapping[str, JSON] = fixed or {}
        """Kwargs every render of these trials gets (another control held at one value)."""

    def holding(self, fixed: Mapping[str, JSON]) -> Trials:
        """The same trials with `fixed` kwargs in every render, the baseline included."""
        return Trials(self.prober, self.prompt, self.history, system=self.system, fixed={**self.fixed, **fixed})

    def without_system(self) -> Trials:
        """The same trials on conversations with no system turn: a kwarg that only changes the template's default
        system prompt acts only there."""
        history = self.history
        if history is not None and history.messages and history.messages[0]["role"] == "system":
            history = HistoryProbe(history.messages[1:], history.tools, history.add_generation_prompt)
        prompt = [message for message in self.prompt if message["role"] != "system"]
        return Trials(self.prober, prompt, history, system=False, fixed=self.fixed)

    def baseline(self) -> Trial:
        return self._trial("controls", None, self.prompt, self.history_messages, {})

    def run(self, candidate: Candidate) -> list[Trial]:
        probe = f"controls.{candidate.name}"
        if candidate.kind == "system_flag":
            flag, whole = candidate.name, candidate.whole
            trial = self._flagged(probe, flag, system=self.system, whole=whole)
            system_text, user_text = FLAGGED_TEXTS if whole else (None, None)
            if self.system and _unflagged(trial, flag, system_text) == _key(self.baseline()):  # in the user's only?
                user = self._flagged(probe, flag, system=False, whole=whole)
                if _unflagged(user, flag, user_text) != _key(self.baseline()):
                    return [replace(user, turn="user")]
            return [trial]
        return [
            self._trial(probe, value, self.prompt, self.history_messages, {candidate.name: value})
            for value in candidate.values
        ]

    def telling(self, proposals: list[Candidate]) -> list[Candidate]:
        """`proposals` less the booleans `quiet` proves change nothing, for callers that only read where a value's
        renders differ from the baseline's. Only where the baseline renders with nothing left to record: else
        `quiet` would record its error (or its tool-list retry) before the candidates' own, not after them."""
        base = self.prober.preview("controls", self.prompt, add_generation_prompt=True, kwargs=self.fixed)
        if base.output is None or (base.error is not None and base.fresh):
            return proposals
        quiet = self.quiet([candidate for candidate in proposals if candidate.kind == "bool"])
        return [candidate for candidate in proposals if candidate.name not in quiet]

    def quiet(self, candidates: list[Candidate]) -> set[str]:
        """The names among these booleans that provably change nothing here: every one of them set to True at once,
        then to False at once, renders as the baseline (prompt and history). A group that does not is split in two
        and each half asked again, so one real switch among many inert names (variables a template sets before it
        reads them, which jinja2's scope analysis still counts as read from the context) costs a few renders, not
        four per name. A single name is left to `run` (its own renders are the group's). The group renders are
        previews (`Prober.preview`): they record nothing (no probe error, no tool-list retry), only the single-value
        renders that follow report."""
        if len(candidates) < 2:
            return set()
        if all(self._together(candidates, value) == _key(self.baseline()) for value in (True, False)):
            return {candidate.name for candidate in candidates}
        half = len(candidates) // 2
        return self.quiet(candidates[:half]) | self.quiet(candidates[half:])

    def _together(self, candidates: list[Candidate], value: bool) -> tuple[str | None, str | None]:
        kwargs = {**self.fixed, **{candidate.name: value for candidate in candidates}}
        prompt = self.prober.preview("controls", self.prompt, add_generation_prompt=True, kwargs=kwargs).output
        history = None
        if self.history is not None and prompt == self.baseline().prompt:
            history = self.prober.preview(
                "controls",
                self.history_messages,
                tools=self.history.tools,
                add_generation_prompt=self.history.add_generation_prompt,
                kwargs=kwargs,
            ).output
        return prompt, history

    def _flagged(self, probe: str, flag: str, *, system: bool, whole: bool) -> Trial:
        history = with_flag(self.history_messages, flag, system=system, whole=whole) if self.history_messages else []
        return self._trial(probe, True, with_flag(self.prompt, flag, system=system, whole=whole), history, {})

    def _trial(
        self, probe: str, value: JSON, prompt: Conversation, history: Conversation, kwargs: Mapping[str, Any]
    ) -> Trial:
        kwargs = {**self.fixed, **kwargs}
        output = self.prober.render(probe, prompt, add_generation_prompt=True, kwargs=kwargs)
        if kwargs != self.fixed and output is not None and self._drops_generation_prompt(probe, prompt, kwargs, output):
            output = None  # a value that suppresses the generation prompt (a retry mode) sets no reasoning state
        history_output = None
        if self.history is not None:
            history_output = self.prober.render(
                probe,
                history,
                tools=self.history.tools,
                add_generation_prompt=self.history.add_generation_prompt,
                kwargs=kwargs,
            )
        return Trial(value, output, history_output)

    def _drops_generation_prompt(
        self, probe: str, prompt: Conversation, kwargs: Mapping[str, Any], output: str
    ) -> bool:
        """Whether `add_generation_prompt` adds nothing under these kwargs though it does without them."""
        fixed = self.fixed
        if output == self.prober.render("controls", prompt, add_generation_prompt=True, kwargs=fixed):
            return False
        if output != self.prober.render(probe, prompt, add_generation_prompt=False, kwargs=kwargs):
            return False
        return self.prober.render("controls", prompt, add_generation_prompt=True, kwargs=fixed) != self.prober.render(
            "controls", prompt, add_generation_prompt=False, kwargs=fixed
        )


def classify(
    candidate: Candidate,
    baseline: Trial,
    trials: list[Trial],
    state: Callable[[str | None], State],
    history: Callable[[str | None], History],
    *,
    text_switches: bool,
    markers: tuple[str, ...] = (),
) -> Control | None:
    """The control `candidate` is, judged from its trials against the baseline; None when it is not one.

    `text_switches`: whether any boolean that only changes text may count; beside a reasoning mechanism only one
    whose changed text holds one of its `markers` or speaks of reasoning does (see `_text_control`)."""
    # A value whose history render raises where the baseline's renders tells nothing of the history (a tool-metadata
    # mapping given a bool raises inside the tool list): a refusal is no effect.
    judged = [trial for trial in trials if trial.history is not None or baseline.history is None]
    rendered = [trial for trial in judged if trial.prompt is not None]
    if candidate.kind == "system_flag":
        rendered = [Trial(False, baseline.prompt, baseline.history), *rendered]
    same = [trial for trial in rendered if _key(trial) == _key(baseline)]
    different = [trial for trial in rendered if _key(trial) != _key(baseline)]
    if not different:
        return None
    base_effect = Effect(state(baseline.prompt), history(baseline.history))
    effects = {_json(trial.value): Effect(state(trial.prompt), history(trial.history)) for trial in rendered}
    moves_state = any(effects[_json(trial.value)].state != base_effect.state for trial in different)
    moves_history = any(effects[_json(trial.value)].history != base_effect.history for trial in different)
    if not (moves_state or moves_history) and not _text_control(candidate, baseline, different, text_switches, markers):
        return None
    default = same[0].value if same else None
    values = sorted(
        [trial.value for trial in same[:1] + different],
        key=lambda value: _order(candidate, value, effects[_json(value)].state),
    )
    return Control(
        name=candidate.name,
        kind=candidate.kind,
        values=tuple(values),
        default=default,
        effect={_json(value): effects[_json(value)] for value in values},
        role=_role(candidate, values, moves_state, moves_history),
        strips_flag=candidate.kind == "system_flag"
        and not any(_shows_flag(trial, baseline, candidate.name, candidate.whole) for trial in trials),
        flag_turn=next((trial.turn for trial in trials if trial.turn != "system"), "system"),
        whole_text=candidate.whole,
    )


def detect_controls(
    proposals: list[Candidate],
    trials: Trials,
    state: Callable[[str | None], State],
    history: Callable[[str | None], History],
    *,
    text_switches: bool,
    markers: tuple[str, ...] = (),
) -> tuple[Control, ...]:
    baseline = trials.baseline()
    alone = trials.without_system() if trials.system else None
    if alone is not None and not _adds_words(alone.baseline().prompt, baseline.prompt):
        alone = None  # no default system prompt for a kwarg to change
    switches = [candidate for candidate in proposals if candidate.kind == "bool"]
    quiet = trials.quiet(switches)
    quiet_alone = alone.quiet([candidate for candidate in switches if candidate.name in quiet]) if alone else quiet
    found = []
    inert = set(quiet)
    """Names that changed nothing, each value rendering (or raising) as the baseline."""
    for candidate in proposals:
        if candidate.name in quiet and candidate.name in quiet_alone:
            continue
        tried = [] if candidate.name in quiet else trials.run(candidate)
        if tried and all(_key(trial) == _key(baseline) for trial in tried):
            inert.add(candidate.name)
        control = classify(candidate, baseline, tried, state, history, text_switches=text_switches, markers=markers)
        if control is None and alone is not None and candidate.kind != "system_flag" and _inert(tried, baseline):
            control = classify(
                candidate,
                alone.baseline(),
                alone.run(candidate),
                state,
                history,
                text_switches=text_switches,
                markers=markers,
            )
            control = replace(control, without_system=True) if control is not None else None
        if control is not None:
            found.append(control)
    return _effort_switches(found + _behind_switch(proposals, found, trials, state, history, markers, inert))


def _adds_words(output: str | None, base: str | None) -> bool:
    """`output` holds a word `base` does not (a default system prompt written where no system turn is given)."""
    known = set(_WORDS.findall(base or ""))
    return any(word not in known for word in _WORDS.findall(output or ""))


_WORDS = re.compile(r"\w+")


def _inert(tried: list[Trial], baseline: Trial) -> bool:
    """No value changed anything: the candidate may act only where there is no system turn."""
    return all(_key(trial) == _key(baseline) for trial in tried if trial.prompt is not None)


def _behind_switch(
    proposals: list[Candidate],
    found: list[Control],
    trials: Trials,
    state: Callable[[str | None], State],
    history: Callable[[str | None], History],
    markers: tuple[str, ...],
    inert: set[str],
) -> list[Control]:
    """Effort levels, budgets and text-only switches that act only with reasoning switched on (DeepSeek-V4's
    `reasoning_effort` reads only when `thinking` is true): the candidates left over, tried again with the state
    toggle held on. Their effects are those renders'. A boolean is tried again only where it changed nothing at all
    without the toggle (one whose own text was judged no reasoning control there is not asked twice)."""
    toggle = next((control for control in found if control.role == "toggle" and control.kind == "bool"), None)
    if toggle is None or not moves_state(toggle):
        return []
    held = trials.holding({toggle.name: toggle.values[-1]})
    baseline = held.baseline()
    names = {control.name for control in found}
    switches = [one for one in proposals if one.kind == "bool" and one.name in inert and one.name not in names]
    quiet = held.quiet(switches)
    more = []
    for candidate in proposals:
        if candidate.name in names | quiet or not (candidate in switches or candidate.kind == "int" or candidate.scale):
            continue  # only effort words, budgets and switches can turn out an effort or budget control here
        tried = held.run(candidate)
        control = classify(candidate, baseline, tried, state, history, text_switches=False, markers=markers)
        if control is not None and (control.role in ("effort", "budget") or not moves_state(control)):
            more.append(replace(control, held=dict(held.fixed)))
    return more


def _effort_switches(controls: list[Control]) -> tuple[Control, ...]:
    """A text-only switch beside a toggle that moves the generation state adjusts effort rather than toggling."""
    if not any(control.role == "toggle" and moves_state(control) for control in controls):
        return tuple(controls)
    return tuple(
        replace(control, role="effort") if control.role == "toggle" and not moves_state(control) else control
        for control in controls
    )


def _shows_flag(trial: Trial, baseline: Trial, flag: str, whole: bool) -> bool:
    """The flag still follows the text it was appended to (`with_flag`) in the render, or, as a turn's whole text,
    shows more often than in the baseline: the template printed it."""
    if trial.prompt is None:
        return False
    if whole:
        return trial.prompt.count(flag) > (baseline.prompt or "").count(flag)
    return any(re.search(re.escape(text) + r"\s*" + re.escape(flag), trial.prompt) for text in FLAGGED_TEXTS)


def _unflagged(trial: Trial, flag: str, replaced: str | None = None) -> tuple[str | None, str | None]:
    """The trial's renders with the flag it printed taken out, or put back to the text it `replaced` (a whole-text
    flag): equal to the baseline's where it did nothing else."""
    prompt, history = _key(trial)
    cut, back = (f" {flag}", "") if replaced is None else (flag, replaced)
    return (
        prompt.replace(cut, back) if prompt is not None else None,
        history.replace(cut, back) if history is not None else None,
    )


def _key(trial: Trial) -> tuple[str | None, str | None]:
    return trial.prompt, trial.history


def _json(value: JSON) -> str:
    return orjson.dumps(value).decode()


def _text_control(
    candidate: Candidate, baseline: Trial, different: list[Trial], text_switches: bool, markers: tuple[str, ...]
) -> bool:
    """Whether a difference in the text alone marks a reasoning control.

    Budgets and effort levels do (an int, or strings on the effort scale). A flag in the system text must move the
    state or the history. A boolean must not print its own value (that is data, like a date); it counts where the
    template has no other reasoning mechanism (`text_switches`: no reasoning form, no markers), and beside one only
    where the text it changes holds a reasoning marker or speaks of reasoning (a system section that tells the model
    to think, an effort note on the user's turn): beside one, other text-only booleans are citations, tool formats
    and the like.
    """
    if candidate.kind == "int":
        return True
    if candidate.kind == "enum":
        return candidate.scale
    if candidate.kind == "system_flag":
        return False
    switched_on = any(trial.value is True for trial in different)
    if not switched_on or any(_prints_value(trial, baseline) for trial in different):
        return False
    return text_switches or any(_speaks_of_reasoning(trial, baseline, markers) for trial in different)


REASONING_WORDS = re.compile(r"\b(?:think|thinking|thought|thoughts|reason|reasoning|effort)\b", re.IGNORECASE)
"""Words that say a changed text is about reasoning (the text a value adds or removes, never the template's source)."""


def _speaks_of_reasoning(trial: Trial, baseline: Trial, markers: tuple[str, ...]) -> bool:
    """The text `trial` adds to or removes from the baseline's prompt holds a reasoning marker or word."""
    output, base = trial.prompt or "", baseline.prompt or ""
    if any(output.count(marker) != base.count(marker) for marker in markers if marker):
        return True
    words, base_words = Counter(_WORDS.findall(output)), Counter(_WORDS.findall(base))
    changed = (words - base_words) + (base_words - words)
    return any(REASONING_WORDS.fullmatch(word) for word in changed)


def _prints_value(trial: Trial, baseline: Trial) -> bool:
    """The value itself appears in the render: the variable is data (a date, a name), not a switch."""
    output, base = trial.prompt or "", baseline.prompt or ""
    texts = {str(trial.value), _json(trial.value)}
    return any(output.count(text) > base.count(text) for text in texts)


def _order(candidate: Candidate, value: JSON, state: State) -> tuple[int, int, int]:
    """Least reasoning first: by generation state, then by effort word, then as proposed (False before True)."""
    level = EFFORT_LEVELS.index(value) if isinstance(value, str) and value in EFFORT_LEVELS else -1
    position = [*candidate.values, False].index(value) if value in [*candidate.values, False] else 0
    if isinstance(value, bool):
        position = int(value)
    return _STATE_RANK[state], level, position


def _role(candidate: Candidate, values: list[JSON], moves_state: bool, moves_history: bool) -> ControlRole:
    if candidate.kind == "int":
        return "budget"
    if moves_history and not moves_state:
        return "history"
    if candidate.kind == "enum" and (any(value in EFFORT_LEVELS for value in values) or not moves_state):
        return "effort"
    return "toggle"
