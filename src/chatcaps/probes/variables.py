"""Which of the names a template reads are the caller's to pass (`Caps.template_variables`).

jinja2's scope analysis lists every name read that is not set on every path before it, so a local the template sets
inside an `if` or a `for` (`system_message`, `loop_messages`, a namespace) counts as undeclared though passing it
changes nothing (macros too). The source only proposes: a name the template also sets or defines as a macro, and
never asks about (`is defined`, `| default`), stays a variable only where some value of it changes some render.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from chatcaps.probes.prober import Prober, conversation, probe_tools

VALUES: tuple[Any, ...] = ("Zq7Var", True, False, 0, "high")
"""Values a caller might pass: a string that would show, both booleans, a number, an effort level."""
CONVERSATIONS = ("system", "tool_call", "reasoning_past")


def caller_variables(prober: Prober, source: str, names: Sequence[str]) -> tuple[str, ...]:
    """`names` less the locals: the names the template sets and never asks about, whose values change no render.
    The suspects are tried together first (most are locals, so one pass clears them), one by one only where that
    changed a render."""
    suspects = [name for name in names if _suspect(source, name)]
    if not suspects or not _changes(prober, suspects):
        return tuple(name for name in names if name not in suspects)
    return tuple(name for name in names if name not in suspects or _changes(prober, [name]))


def _suspect(source: str, name: str) -> bool:
    """The template sets `name` (or defines a macro of it) and never asks whether it was given."""
    word = re.escape(name)
    if not re.search(rf"{{%-?\s*(?:set\s+{word}\s*=|macro\s+{word}\b)", source):
        return False  # never set nor defined here: only the caller gives it
    asks = rf"\b{word}\s+is\s+(?:not\s+)?defined|\b{word}\s*\|\s*default\b|\bdefined\s*\(\s*{word}\b"
    return not re.search(asks, source)


def _changes(prober: Prober, names: Sequence[str]) -> bool:
    """Some value given to all of `names` changes some probe render (or makes it raise)."""
    for name_of in CONVERSATIONS:
        messages, tools = conversation(name_of), probe_tools()
        plain = prober.attempt("template_variables", messages, tools=tools, add_generation_prompt=True).output
        for value in VALUES:
            kwargs = dict.fromkeys(names, value)
            found = prober.attempt(
                "template_variables", messages, tools=tools, add_generation_prompt=True, kwargs=kwargs
            )
            if found.output != plain:
                return True
    return False
