"""The `text` content parser's strip, applied as a region's text arrives: what a delta may send of it now."""

from __future__ import annotations


class Layout:
    """`str.strip` on a region's text as it arrives: the `text` parser strips the whole value when the region closes.
    Leading whitespace is dropped, trailing whitespace held until more text comes (and dropped if none does)."""

    def __init__(self, separator: str = "") -> None:
        self.started = False
        self.held = ""
        self.separator = separator
        """Sent before the region's first text: the join between this piece and an earlier one of the field."""

    def push(self, text: str) -> str:
        """What of `text` can be sent now."""
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
            text = self.separator + text if text else text
        text = self.held + text
        kept = text.rstrip()
        self.held = text[len(kept) :]
        return kept
