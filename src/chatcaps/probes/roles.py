"""Which roles a template renders: system (leading and inline), developer, and whether turns must alternate."""

from __future__ import annotations

from chatcaps.caps import Roles
from chatcaps.probes.prober import Prober, conversation
from chatcaps.probes.text import shows


def detect_roles(prober: Prober, *, typed: bool = False) -> Roles:
    """`typed`: the template shows only typed content (`Content.requires_typed`), so the probes send text blocks."""

    def renders(name: str, *sentinels: str) -> bool:
        messages = conversation(name)
        if typed:
            messages = [{**message, "content": [{"type": "text", "text": message["content"]}]} for message in messages]
        return shows(prober.render(f"roles.{name}", messages, add_generation_prompt=True), *sentinels)

    # Lost text counts only where the same text renders in an alternating conversation.
    answer_renders = renders("user_assistant", "Zq7Answer1")
    system = renders("system", "Zq7System1")
    return Roles(
        system=system,
        # An inline system turn renders, and not in place of the leading one (some templates keep only the last).
        system_inline=renders("system_inline", "Zq7System2", *(["Zq7System1"] if system else [])),
        developer=renders("developer", "Zq7Developer1"),
        requires_alternation=not renders("user_user", "Zq7User1", "Zq7User2")
        or (answer_renders and not renders("assistant_assistant", "Zq7Answer1", "Zq7Answer2")),
    )
