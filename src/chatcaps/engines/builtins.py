"""The filter and global transformers adds to every chat-template environment, shared by both engines.

`raise_exception` is per engine: each raises the exception its engine passes through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

_pinned_now: ContextVar[datetime | None] = ContextVar("chatcaps_pinned_now", default=None)


def tojson(
    x: Any, ensure_ascii: bool = False, indent: int | str | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """transformers' `tojson`: `json.dumps` with its options and without jinja2's HTML escaping."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


STRFTIME_DIRECTIVE_CHARS = 64
"""The most characters one `%` directive is counted as producing (`%c` gives 24 in English, more in some locales)."""


def strftime_size(format: str) -> int:
    """An upper bound on the length of `strftime_now(format)`; a long format is one slow C call, so it is checked
    against `max_operand_chars` before the call."""
    return len(format) + STRFTIME_DIRECTIVE_CHARS * format.count("%")


def strftime_now(format: str) -> str:
    """The current local time, formatted (templates use it for "Today's date"); see `pinned_clock`."""
    return (_pinned_now.get() or datetime.now()).strftime(format)


@contextmanager
def pinned_clock(now: datetime) -> Iterator[None]:
    """Make `strftime_now` return `now` in this thread (and context) while the block runs: probes are reproducible."""
    token = _pinned_now.set(now)
    try:
        yield
    finally:
        _pinned_now.reset(token)
