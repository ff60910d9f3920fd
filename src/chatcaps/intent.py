"""The reasoning intent (`reasoning=` in `ChatTemplate.render`) mapped onto what a template detectably offers.

`None` keeps the template's default. `"off"`/`"on"` use a toggle (a bool or enum kwarg, or a system-text flag such as
`/no_think`); `"low"`/`"medium"`/`"high"` an effort level or a budget; an int a budget. Without a control, a
generation-prompt prefill opens or closes the reasoning block with the detected markers. Where a template cannot do
what was asked, the closest thing is sent and `ReasoningRecord.exact` is False with a note saying what happened:
`exact` means the template's own mechanism expresses exactly the intent.

`plan_intent` only decides; the pipeline's last step (`chatcaps.polyfills.intent`) carries the plan out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Literal

import orjson

from chatcaps.caps import JSON, Caps, Control
from chatcaps.errors import InputError
from chatcaps.vocab import EFFORT_LEVELS, TIER_BUDGETS, TIERS, moves_state, shown
from chatcaps.vocab import Intent as Intent

Mechanism = Literal["default", "kwarg", "system_flag", "prefill", "template_args", "none"]
_CLOSED = frozenset({"closed"})
_NO_KWARGS: Mapping[str, JSON] = MappingProxyType({})
_SPELLED = ", ".join(f'"{name}"' for name in ("off", "on", *TIERS))


@dataclass(frozen=True)
class ReasoningRecord:
    """What was done for the intent, for `RenderResult.reasoning`."""

    intent: Intent
    mechanism: Mechanism
    emitted: JSON | Mapping[str, JSON] = None
    """The kwargs passed (read-only), the flag added, or the prefill appended; None when nothing was."""
    exact: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "intent": self.intent,
            "mechanism": self.mechanism,
            "emitted": dict(self.emitted) if isinstance(self.emitted, Mapping) else self.emitted,
            "exact": self.exact,
            "note": self.note,
        }


@dataclass(frozen=True)
class IntentPlan:
    """How to realise an intent: kwargs to pass, a flag for the system text, text to append to the prompt, and
    what the render's warnings should say about it."""

    record: ReasoningRecord
    kwargs: Mapping[str, JSON] = field(default_factory=lambda: _NO_KWARGS)
    flag: str | None = None
    prefill: str = ""
    warnings: tuple[str, ...] = ()


def validate_intent(intent: object) -> Intent:
    if intent is None or intent in ("off", "on", *TIERS):
        return intent  # type: ignore[return-value]
    if isinstance(intent, int) and not isinstance(intent, bool) and intent >= 0:
        return intent
    raise InputError(f"reasoning must be None, {_SPELLED} or a token budget >= 0, got {shown(intent)}")


def tier_of_budget(budget: int) -> str:
    """The smallest tier whose budget covers `budget` (rounding up); past the top tier, the top tier."""
    return next((tier for tier in TIERS if budget <= TIER_BUDGETS[tier]), TIERS[-1])


_DEFAULT_PLAN = IntentPlan(ReasoningRecord(None, "default", note="template default"))
"""The plan for no intent, the usual case."""


def plan_intent(intent: Intent, caps: Caps, template_args: Mapping[str, Any]) -> IntentPlan:
    """The plan for `intent` on a template with these Caps, where `template_args` may already set some of its
    controls. Plans are read-only and depend on nothing else, so each is made once (per Caps object, the last
    `PLANS_KEPT`) and shared by every render that asks for it."""
    if intent is None:
        return _DEFAULT_PLAN
    preset = tuple(control.name for control in caps.reasoning.controls if control.name in template_args)
    return _plan(_Same(caps), intent, preset)


class _Same:
    """Caps as a memo key, compared by identity: Caps hold dicts and do not hash, and the memo keeps the Caps it
    holds alive, so an identity is never reused while its plans are kept."""

    __slots__ = ("caps",)

    def __init__(self, caps: Caps) -> None:
        self.caps = caps

    def __hash__(self) -> int:
        return id(self.caps)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.caps is self.caps


PLANS_KEPT = 256


@lru_cache(maxsize=PLANS_KEPT, typed=True)
def _plan(same: _Same, intent: Intent, preset: tuple[str, ...]) -> IntentPlan:
    caps = same.caps
    controls = caps.reasoning.controls
    if preset:
        note = f"template_args set {', '.join(preset)}; the intent was not applied over them"
        return IntentPlan(ReasoningRecord(intent, "template_args", exact=False, note=note), warnings=(note,))
    if intent == 0:
        budget = _first(controls, "budget")
        if budget is None:
            plan = _off(caps)
            record = _renote(plan.record, 0, "a budget of 0 means off", exact=plan.record.exact)
            return IntentPlan(record, plan.kwargs, plan.flag, plan.prefill)
    if intent == "off":
        return _off(caps)
    if intent == "on":
        return _on(caps)
    return _level(intent, caps)


def _off(caps: Caps) -> IntentPlan:
    toggle = _toggle(caps)
    if toggle is not None:
        value = toggle.values[0]
        if _state(toggle, value) in _CLOSED or (value is False and toggle.kind == "bool"):
            return _use(toggle, value, "off", exact=True)
    effort = _first(caps.reasoning.controls, "effort")
    if effort is not None:
        lowest = effort.values[0]
        exact = lowest == "none" or _state(effort, lowest) in _CLOSED
        note = "" if exact else f"no off switch; the lowest effort level {lowest!r} instead"
        return _use(effort, lowest, "off", exact=exact, note=note)
    budget = _first(caps.reasoning.controls, "budget")
    if budget is not None and 0 in budget.values:
        return _use(budget, 0, "off", exact=True)
    if caps.reasoning.default_state in ("closed", "none"):
        note = "the template's default is already off" if caps.reasoning.default_state == "closed" else ""
        note = note or "the template has no reasoning"
        return IntentPlan(ReasoningRecord("off", "default", exact=True, note=note))
    start, end = caps.reasoning.start_marker, caps.reasoning.end_marker
    if start and end:
        # A prompt that already opened the block only needs it closed.
        prefill = f"{end}\n\n" if caps.reasoning.default_state == "forced_open" else f"{start}\n\n{end}\n\n"
        note = "no off switch; an empty reasoning block prefilled in the generation prompt"
        return IntentPlan(ReasoningRecord("off", "prefill", prefill, exact=False, note=note), prefill=prefill)
    return IntentPlan(ReasoningRecord("off", "none", exact=False, note="the template has no way to turn reasoning off"))


def _on(caps: Caps, intent: Intent = "on", note: str = "") -> IntentPlan:
    """Reasoning switched on; `note` (set when a level was asked for) makes the result inexact."""
    toggle = _toggle(caps)
    if toggle is not None:
        return _use(toggle, toggle.values[-1], intent, exact=not note, note=note)
    level = _on_level(caps)
    if level is not None:
        return level
    state, start = caps.reasoning.default_state, caps.reasoning.start_marker
    if state == "forced_open":
        return IntentPlan(
            ReasoningRecord(intent, "default", exact=not note, note=_join(note, "the template opens reasoning"))
        )
    if start and state in ("free", "closed"):
        prefill = f"{start}\n"
        extra = "no switch; the reasoning block opened in the generation prompt"
        return IntentPlan(
            ReasoningRecord(intent, "prefill", prefill, exact=False, note=_join(note, extra)), prefill=prefill
        )
    if state == "free":
        extra = "no switch and no opening marker; the model decides whether to reason"
        return IntentPlan(ReasoningRecord(intent, "default", exact=False, note=_join(note, extra)))
    return IntentPlan(ReasoningRecord(intent, "none", exact=False, note=_join(note, "the template has no reasoning")))


def _on_level(caps: Caps) -> IntentPlan | None:
    """ "on" through an effort or budget control: its default where that reasons, else a middle setting."""
    effort = _first(caps.reasoning.controls, "effort")
    if effort is not None:
        reasoning_values = [value for value in effort.values if not _is_off(effort, value)]
        if reasoning_values:
            value = effort.default if effort.default in reasoning_values else None
            value = value or ("medium" if "medium" in reasoning_values else reasoning_values[0])
            return _use(effort, value, "on", exact=True)
    budget = _first(caps.reasoning.controls, "budget")
    if budget is not None:
        default = budget.default
        value = default if isinstance(default, int) and not _is_off(budget, default) else TIER_BUDGETS["medium"]
        return _use(budget, value, "on", exact=True)
    return None


def _is_off(control: Control, value: JSON) -> bool:
    return value in ("none", 0) or _state(control, value) in _CLOSED


def _level(intent: Intent, caps: Caps) -> IntentPlan:
    controls = caps.reasoning.controls
    budget = _first(controls, "budget")
    effort = _first(controls, "effort")
    if isinstance(intent, int):
        if budget is not None:
            return _with_toggle(caps, _use(budget, intent, intent, exact=True))
        tier = tier_of_budget(intent)
        if effort is None and caps.reasoning.default_state == "none":
            return IntentPlan(ReasoningRecord(intent, "none", exact=False, note="the template has no reasoning"))
        if effort is None:
            return _on(caps, intent, f"no budget or effort control; a budget of {intent} can only turn reasoning on")
        plan = _effort(effort, tier, intent)
        return _with_toggle(caps, IntentPlan(_renote(plan.record, intent, f"budget {intent} -> {tier}"), plan.kwargs))
    if effort is not None:
        return _with_toggle(caps, _effort(effort, str(intent), intent))
    if budget is not None:
        return _with_toggle(caps, _use(budget, TIER_BUDGETS[str(intent)], intent, exact=True))
    if caps.reasoning.default_state == "none":
        return IntentPlan(ReasoningRecord(intent, "none", exact=False, note="the template has no reasoning"))
    return _on(caps, intent, "no effort levels; reasoning turned on")


def _effort(control: Control, tier: str, intent: Intent) -> IntentPlan:
    if tier in control.values:
        return _use(control, tier, intent, exact=True)
    ranked = [value for value in control.values if isinstance(value, str) and value in EFFORT_LEVELS]
    if not ranked:
        return _use(control, control.values[-1], intent, exact=False, note=f"no level like {tier!r}; the highest value")
    target = EFFORT_LEVELS.index(tier)
    nearest = min(ranked, key=lambda value: (abs(EFFORT_LEVELS.index(value) - target), -EFFORT_LEVELS.index(value)))
    return _use(control, nearest, intent, exact=False, note=f"no {tier!r} level; the nearest, {nearest!r}")


def _with_toggle(caps: Caps, plan: IntentPlan) -> IntentPlan:
    """A level also needs reasoning switched on where a separate toggle is off by default."""
    toggle = _toggle(caps)
    if toggle is None or toggle.kind == "system_flag" or plan.record.mechanism != "kwarg":
        return plan
    on = toggle.values[-1]
    if on == toggle.default:
        return plan
    kwargs = MappingProxyType({**plan.kwargs, toggle.name: on})
    record = ReasoningRecord(plan.record.intent, "kwarg", kwargs, plan.record.exact, plan.record.note)
    return IntentPlan(record, kwargs)


def _use(control: Control, value: JSON, intent: Intent, *, exact: bool, note: str = "") -> IntentPlan:
    if control.kind == "system_flag":
        if value is True:
            shown = "" if control.strips_flag else f"the template prints {control.name} where the model reads it"
            record = ReasoningRecord(intent, "system_flag", control.name, exact, _join(note, shown))
            return IntentPlan(record, flag=control.name)
        return IntentPlan(ReasoningRecord(intent, "default", None, exact, _join(note, f"{control.name} left out")))
    kwargs = MappingProxyType({control.name: value})
    return IntentPlan(ReasoningRecord(intent, "kwarg", kwargs, exact, note), kwargs)


def _toggle(caps: Caps) -> Control | None:
    """The toggle that moves the generation state, else the first toggle."""
    toggles = [control for control in caps.reasoning.controls if control.role == "toggle"]
    moving = [control for control in toggles if moves_state(control)]
    found = moving or toggles
    return found[0] if found else None


def _first(controls: tuple[Control, ...], role: str) -> Control | None:
    return next((control for control in controls if control.role == role), None)


def _state(control: Control, value: JSON) -> str:
    effect = control.effect.get(orjson.dumps(value).decode())
    return effect.state if effect else "free"


def _renote(record: ReasoningRecord, intent: Intent, note: str, *, exact: bool = False) -> ReasoningRecord:
    """`record` for another intent that was converted into it (a budget into a tier, 0 into off), saying how."""
    return ReasoningRecord(intent, record.mechanism, record.emitted, exact, _join(note, record.note))


def _join(*notes: str) -> str:
    return "; ".join(note for note in notes if note)
