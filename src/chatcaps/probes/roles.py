"""Which roles a template renders: system (leading and inline), developer, and whether turns must alternate."""

from __future__ import annotations

from chatcaps.caps import Roles
from chatcaps.probes.prober import Prober, conversation
from chatcaps.probes.text import shows


def detect_roles(prober: Prober) -> Roles:
    def renders(name: str, *sentinels: str) -> bool:
        return shows(prober.render(f"roles.{name}", conversation(name), add_generation_prompt=True), *sentinels)

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
