"""Which roles a template renders: system (leading and inline), developer, and whether turns must alternate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chatcaps.caps import Roles
from chatcaps.probes.prober import Prober, as_role, conversation
from chatcaps.probes.text import shows


def detect_roles(prober: Prober, *, typed: bool = False) -> Roles:
    """`typed`: the template shows only typed content (`Content.requires_typed`), so the probes send text blocks."""

    def shaped(name: str) -> list[dict[str, Any]]:
        messages = conversation(name)
        if typed:
            messages = [{**message, "content": [{"type": "text", "text": message["content"]}]} for message in messages]
        return messages

    def renders(name: str, *sentinels: str) -> bool:
        return shows(prober.render(f"roles.{name}", shaped(name), add_generation_prompt=True), *sentinels)

    def own(name: str, role: str) -> bool:
        """The turns of `role` render, and otherwise than as a user's or an assistant's turn of the same text (a
        template whose `else` branch writes any other role under the assistant's header has no such role)."""
        messages = shaped(name)
        output = prober.render(f"roles.{name}", messages, add_generation_prompt=True)
        return output is not None and all(
            prober.attempt(f"roles.{name}", as_role(messages, role, other), add_generation_prompt=True).output != output
            for other in ("user", "assistant")
        )

    # Lost text counts only where the same text renders in an alternating conversation.
    answer_renders = renders("user_assistant", "Zq7Answer1")
    system = renders("system", "Zq7System1")
    return Roles(
        system=system,
        # An inline system turn renders, and not in place of the leading one (some templates keep only the last).
        system_inline=renders("system_inline", "Zq7System2", *(["Zq7System1"] if system else [])),
        developer=renders("developer", "Zq7Developer1") and own("developer", "developer"),
        requires_alternation=not renders("user_user", "Zq7User1", "Zq7User2")
        or (answer_renders and not renders("assistant_assistant", "Zq7Answer1", "Zq7Answer2"))
        or (answer_renders and _answer_opened_between_users(prober, shaped)),
    )


def _answer_opened_between_users(prober: Prober, shaped: Callable[[str], list[dict[str, Any]]]) -> bool:
    """Two user turns in a row render with the assistant turn's opening between them (a template whose user turn
    always ends by opening the answer, Yi-Coder's `<|im_start|>assistant\n`): the model would read an empty answer
    that was never closed, so turns must alternate (the polyfill merges them)."""
    answered = prober.render("roles.user_assistant", shaped("user_assistant"), add_generation_prompt=True)
    users = prober.render("roles.user_user", shaped("user_user"), add_generation_prompt=True)
    if answered is None or users is None:
        return False
    opening = _between(answered, "Zq7User1", "Zq7Answer1")
    between = _between(users, "Zq7User1", "Zq7User2")
    return opening is not None and between is not None and bool(opening.strip()) and opening in between


def _between(text: str, first: str, second: str) -> str | None:
    start = text.find(first)
    end = text.find(second, start + len(first)) if start >= 0 else -1
    return text[start + len(first) : end] if end >= 0 else None
