"""A call format's `${...}` holes as regular-expression groups: the name, an id, an index, a parameter's key and
value (`pattern`: a format's text as a pattern, its holes captured)."""

from __future__ import annotations

from chatcaps.vocab import placeholder_pattern

NAME_PATTERN = r"(?P<name>[\w.\-]+)"
HOLES = {
    "name": NAME_PATTERN,
    "id": r"(?P<id>[^\s<>\"'\[\]]+)",
    "index": r"(?P<index>\d+)",
    "key": r"(?P<key>[^<>\"=\n]+?)",
    "value": r"(?P<value>.*?)",
}


def pattern(text: str) -> str:
    """`text` as a pattern, its holes as `HOLES` captures them."""
    return placeholder_pattern(text, HOLES)
