"""`reasoning_intent`, the last step: the `reasoning=` intent carried out as `chatcaps.intent` plans it.

It runs after every other step, on their output, and like them returns the request and a record of each change (the
system flag it added); it also returns the plan, for what the render itself takes from it: the kwargs, the prefill
appended to the prompt, the flag (the generation prompt is measured with it), and the warnings. Where the plan
cannot be carried out (no turn to take the flag, no generation prompt for a prefill), the plan returned says so.
"""

from __future__ import annotations

from dataclasses import replace

from chatcaps.caps import Caps
from chatcaps.intent import Intent, IntentPlan, ReasoningRecord, plan_intent
from chatcaps.polyfills.base import Applied, Message, Options, Request

NAME = "reasoning_intent"
IntentOutcome = tuple[Request, tuple[Applied, ...], IntentPlan]
_NO_PREFILL = "the template has no switch and a prefill needs a generation prompt; nothing was sent"


def reasoning_intent(request: Request, caps: Caps, options: Options) -> IntentOutcome:
    intent = options.reasoning
    plan = plan_intent(intent, caps, options.template_args)
    if plan.flag:
        request, applied = add_flag(request, caps, plan.flag)
        if not applied:
            return request, (), _nothing_sent(intent, _no_turn(request, caps, plan.flag))
        return request, applied, plan
    if plan.prefill and not options.prefill:
        return request, (), _nothing_sent(intent, _NO_PREFILL, warn=True)
    return request, (), _unheard(plan, request, caps)


def _unheard(plan: IntentPlan, request: Request, caps: Caps) -> IntentPlan:
    """`plan`, inexact and saying why where a kwarg it sends acts only without a system turn (it rewrites the
    template's default system prompt) and the request brings one: the template then ignores it."""
    if not plan.kwargs or not request.messages or request.messages[0]["role"] != "system":
        return plan
    unheard = [control.name for control in caps.reasoning.controls if control.without_system]
    unheard = [name for name in unheard if name in plan.kwargs]
    if not unheard:
        return plan
    note = (
        f"{', '.join(unheard)} acts only without a system message (it rewrites the template's default system "
        "prompt); the request has one, so the template ignores it"
    )
    record = plan.record
    record = replace(record, exact=False, note=f"{record.note}; {note}" if record.note else note)
    return replace(plan, record=record, warnings=(*plan.warnings, note))


def switched_off(options: Options) -> IntentPlan:
    """The plan when the step is disabled: nothing is done for the intent, exactly so only when there was none."""
    intent = options.reasoning
    return IntentPlan(ReasoningRecord(intent, "none", exact=intent is None, note="reasoning_intent is off"))


def add_flag(request: Request, caps: Caps, flag: str) -> tuple[Request, tuple[Applied, ...]]:
    """`flag` (e.g. "/no_think") appended to the system turn, a new system turn where the template has that role, or
    else the last user turn; to the last user turn where the probes found it to act only there (`flag_turn`). A
    flag the template compares with a turn's whole text (`whole_text`) only as a new system turn: the request's own
    text is never replaced. No record when there is no turn to take it."""
    messages: list[Message] = list(request.messages)
    control = next((control for control in caps.reasoning.controls if control.name == flag), None)
    in_user = control is not None and control.flag_turn == "user"
    if control is not None and control.whole_text:
        if in_user or not caps.roles.system or (messages and messages[0]["role"] == "system"):
            return request, ()
        messages.insert(0, {"role": "system", "content": flag})
        return Request(tuple(messages), request.tools), (Applied(NAME, f"{flag} added as a new system turn"),)
    if (
        not in_user
        and messages
        and messages[0]["role"] == "system"
        and isinstance(messages[0].get("content"), str | None)
    ):
        messages[0] = {**messages[0], "content": f"{messages[0].get('content') or ''} {flag}".lstrip()}
        where = "messages[0] (system)"
    elif not in_user and caps.roles.system:
        messages.insert(0, {"role": "system", "content": flag})
        where = "a new system turn"
    else:
        users = [index for index, message in enumerate(messages) if message["role"] == "user"]
        if not users:
            return request, ()
        index = users[-1]
        value = messages[index].get("content")
        text = f"{value} {flag}" if isinstance(value, str) else [*(value or []), {"type": "text", "text": flag}]
        messages[index] = {**messages[index], "content": text}
        where = f"messages[{index}] (the last user turn)"
    return Request(tuple(messages), request.tools), (Applied(NAME, f"{flag} added to {where}"),)


def _no_turn(request: Request, caps: Caps, flag: str) -> str:
    control = next((control for control in caps.reasoning.controls if control.name == flag), None)
    if control is not None and control.whole_text:
        return f"the template acts on {flag} only as a turn's whole text, and the request's own text is kept"
    return f"no turn to add {flag} to"


def _nothing_sent(intent: Intent, note: str, *, warn: bool = False) -> IntentPlan:
    return IntentPlan(ReasoningRecord(intent, "none", exact=False, note=note), warnings=(note,) if warn else ())
