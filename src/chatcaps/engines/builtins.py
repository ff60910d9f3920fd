"""The `strftime_now` global transformers adds to every chat-template environment, shared by both engines.

`raise_exception` is per engine: each raises the exception its engine passes through unchanged; `tojson` is
`bounds.bounded_json`, which also bounds its size.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

_pinned_now: ContextVar[datetime | None] = ContextVar("chatcaps_pinned_now", default=None)


STRFTIME_DIRECTIVE_CHARS = 64
"""The most characters one `%` directive is counted as producing (`%c` gives 24 in English, more in some locales)."""


def strftime_size(format: str) -> int:
    """An upper bound on the length of `strftime_now(format)`; a long format is one slow C call, so it is checked
    against `max_operand_chars` before the call."""
    return len(format) + STRFTIME_DIRECTIVE_CHARS * format.count("%")


def strftime_now(format: str) -> str:
    """The current local time, formatted (templates use it for "Today's date"); see `pinned_clock`."""
    return (_pinned_now.get() or datetime.now()).strftime(format)


def pinned_now() -> datetime | None:
    """The time `pinned_clock` pinned in this thread, if any: an isolated render pins it in its worker too."""
    return _pinned_now.get()


@contextmanager
def pinned_clock(now: datetime) -> Iterator[None]:
    """Make `strftime_now` return `now` in this thread (and context) while the block runs: probes are reproducible."""
    token = _pinned_now.set(now)
    try:
        yield
    finally:
        _pinned_now.reset(token)
