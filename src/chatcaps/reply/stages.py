"""Stages the generated text passes through before `ReplyStream` routes it, each a small object of its own (as
httpx chains its decoders): `feed` takes a piece and gives what goes on (holding what is not decided yet), `flush`
gives what is held once the text has ended.

`RepeatedTag`: the tag the generation prompt ends with (Command R+'s `<|CHATBOT_TOKEN|>`, Phi-3's `<|assistant|>`),
which a model may write again as its first text: the turn's grammar, never its content, so it is dropped (warned).
"""

from __future__ import annotations

import re

from chatcaps.caps import Caps

_LAST_TAG = re.compile(r"(<[^<>\s]+>)\s*\Z")


def repeated_tag(caps: Caps, prefix: str) -> str | None:
    """The tag the generation prompt ends with, which a model may write again as its first text. None where the
    prompt ends with no tag, with a reasoning marker (the grammar reads a repeated or lone marker itself), or where
    the `prefix` given is another prompt."""
    found = _LAST_TAG.search(caps.generation_prompt or "")
    if found is None or found[1] in (caps.reasoning.start_marker, caps.reasoning.end_marker):
        return None
    return found[1] if not prefix or prefix.rstrip().endswith(found[1]) else None


class RepeatedTag:
    """The text less `tag` where the message starts with it again (layout before it aside); `done` once that is
    decided, after which the stage passes nothing more through and is dropped."""

    def __init__(self, tag: str, warnings: list[str]) -> None:
        self.tag = tag
        self.done = False
        self._held = ""
        self._warnings = warnings

    def feed(self, text: str) -> str:
        """`text` as it goes on: "" while what the message has written may still be the tag (held)."""
        held = self._held + text
        written = held.lstrip()
        if self.tag.startswith(written):
            self._held = held
            return ""
        self.done = True
        if not written.startswith(self.tag):
            return held
        self._warnings.append(
            f"the reply starts with the generation prompt's last tag again, read as grammar: {self.tag!r}"
        )
        return written[len(self.tag) :]

    def flush(self) -> str:
        """What is held: the text ended while it could still be the tag, so it was text."""
        self.done = True
        held, self._held = self._held, ""
        return held
