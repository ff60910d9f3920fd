"""The generation prompt and whether the template writes `bos_token`."""

from __future__ import annotations

from chatcaps.probes.prober import Conversation, Prober, conversation
from chatcaps.vocab import added_after

BOS_SENTINEL = "Zq7Bos"


def base_conversation(prober: Prober) -> Conversation:
    """The smallest conversation the template renders: one user turn, or a system and a user turn."""
    for name in ("user", "system"):
        messages = conversation(name)
        if prober.render("generation_prompt", messages, add_generation_prompt=True) is not None:
            return messages
    return conversation("user")


def generation_prompt(prober: Prober, messages: Conversation) -> str | None:
    """What `add_generation_prompt` appends: the whole-output difference of two renders (some templates also end the
    last turn differently without it). None when either render fails."""
    without = prober.render("generation_prompt", messages, add_generation_prompt=False)
    with_prompt = prober.render("generation_prompt", messages, add_generation_prompt=True)
    if without is None or with_prompt is None:
        return None
    return added_after(without, with_prompt)


def emits_bos(prober: Prober, messages: Conversation) -> bool:
    """A sentinel `bos_token` appears, or the template hard-codes the given `bos_token` at the start."""
    probe = Prober(prober.renderer, bos_token=BOS_SENTINEL, eos_token=prober.eos_token, deadline=prober.deadline)
    output = probe.render("emits_bos", messages, add_generation_prompt=True)
    if output is not None and BOS_SENTINEL in output:
        return True
    if not prober.bos_token:
        return False
    output = prober.render("emits_bos", messages, add_generation_prompt=True)
    return output is not None and output.startswith(prober.bos_token)
