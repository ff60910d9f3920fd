"""Reading probe output: which sentinels appear, and the text between them."""

from __future__ import annotations

import re

from chatcaps.vocab import common_prefix_length

ONE_TAG = re.compile(r"<[^<>\s]+>|\[[^\[\]\s]+\]")
"""One tag, no space in it: `<|START_RESPONSE|>`, `</think>`, `[TOOL_CALLS]`."""


def shows(output: str | None, *sentinels: str) -> bool:
    """True when the render succeeded and every sentinel appears in it."""
    return output is not None and all(sentinel in output for sentinel in sentinels)


def leaks(output: str | None, baseline: str | None, fragments: tuple[str, ...]) -> bool:
    """True when `output` carries a fragment (a Python or JSON repr piece) that the baseline render did not."""
    if output is None:
        return False
    return any(fragment in output and (baseline is None or fragment not in baseline) for fragment in fragments)


def _boundary(text: str, at: int) -> bool:
    return at <= 0 or at >= len(text) or text[at - 1].isspace() or text[at] in "<["


def differing_suffix(base: str, other: str) -> str:
    """`other` from the token where it first differs from `base`: a shared prefix never splits a special token
    ("<|START_RESPONSE|>" vs "<|START_THINKING|>" differ from "<|START_", not from "THINKING")."""
    at = common_prefix_length(base, other)
    while not _boundary(other, at):
        at -= 1
    return other[at:]


def differing_prefix(base: str, other: str) -> str:
    """`other` up to the token where its shared ending with `base` starts (the mirror of `differing_suffix`)."""
    at = len(other) - common_prefix_length(base[::-1], other[::-1])
    while not _boundary(other, at):
        at += 1
    return other[:at]
