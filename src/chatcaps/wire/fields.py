"""The checks every wire's request reader shares, each written once: a flag, a number in its bounds, a list of stop
strings, llama-server's own sampling fields, and Anthropic-style `thinking` as the reasoning intent (which OpenAI
bodies may send too). A bad value raises `InputError` naming the field (`request.temperature must be ...`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chatcaps.errors import InputError
from chatcaps.vocab import Intent, shown

LLAMA_CPP_FIELDS = (
    "grammar",
    "json_schema",
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "repeat_last_n",
    "dynatemp_range",
    "dynatemp_exponent",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "dry_sequence_breakers",
    "xtc_probability",
    "xtc_threshold",
)
"""llama-server's `/completion` sampling fields, beyond OpenAI's, that a request of either API may set (llama-server
checks their values: one it refuses is its 400, answered as a 502 naming that status)."""
CONSTRAINED = ("response_format",)
"""Request fields that only a grammar can honour (`Sampling.constrained`): a backend that applies none refuses them
by name. `tool_choice` is the pipeline's (`serve/pipeline.py`): a template that reads it honours it without one."""
_LLAMA_CPP_KINDS: Mapping[str, tuple[type, str]] = {"grammar": (str, "a string"), "json_schema": (dict, "an object")}


def flag(body: Mapping[str, Any], name: str, *, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise InputError(f"request.{name} must be true or false, got {shown(value)}", field=name)
    return value


def number(
    body: Mapping[str, Any],
    name: str,
    kind: type[float],
    *,
    low: float | None = None,
    high: float | None = None,
    joined: bool = False,
) -> Any:
    """`body[name]` as `kind` (int or float), within its bounds; None where it is absent. The refusal says what was
    wrong, the kind or the bounds; `joined`, both at once whatever was wrong (Anthropic's reader's words)."""
    value = body.get(name)
    if value is None:
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    typed = numeric and (kind is not int or isinstance(value, int))
    if typed and (low is None or value >= low) and (high is None or value <= high):
        return kind(value)
    said = "an integer" if kind is int else "a number"
    bounds = "" if low is None else f">= {low}" if high is None else f"between {low} and {high}"
    must = f"{said} {bounds}".rstrip() if joined else bounds if typed else said
    raise InputError(f"request.{name} must be {must}, got {shown(value)}", field=name)


def stops(value: Any, name: str, *, one: bool = False, most: int | None = None, empty: bool = True) -> tuple[str, ...]:
    """Stop strings: a list of strings (`most` at most; `empty`: "" allowed), or, with `one`, a string alone."""
    if value is None:
        return ()
    if one and isinstance(value, str):
        return (value,)
    strings = isinstance(value, list) and all(isinstance(item, str) and (empty or item) for item in value)
    if strings and (most is None or len(value) <= most):
        return tuple(value)
    kinds = f"{'a string or ' if one else ''}a list of {f'up to {most} ' if most else ''}"
    raise InputError(
        f"request.{name} must be {kinds}{'' if empty else 'non-empty '}strings, got {shown(value)}", field=name
    )


def llama_cpp_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The `LLAMA_CPP_FIELDS` the body sets, as given (the two that have a type checked)."""
    given = {name: body[name] for name in LLAMA_CPP_FIELDS if body.get(name) is not None}
    for name, (kind, said) in _LLAMA_CPP_KINDS.items():
        if name in given and not isinstance(given[name], kind):
            raise InputError(f"request.{name} must be {said}, got {shown(given[name])}", field=name)
    return given


def thinking_intent(value: Any) -> Intent:
    """Anthropic's `thinking` object as the intent: disabled is off, enabled is on, or its `budget_tokens`."""
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "disabled":
        return "off"
    if kind == "enabled":
        budget = value.get("budget_tokens")
        if budget is None:
            return "on"
        if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0:
            return budget
        raise InputError(
            f"request.thinking.budget_tokens must be an integer >= 0, got {shown(budget)}", field="thinking"
        )
    raise InputError(
        'request.thinking must be {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}', field="thinking"
    )
