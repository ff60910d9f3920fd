"""The filter and global transformers adds to every chat-template environment, shared by both engines.

`raise_exception` is per engine: each raises the exception its engine passes through unchanged.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any


def tojson(
    x: Any, ensure_ascii: bool = False, indent: int | str | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """transformers' `tojson`: `json.dumps` with its options and without jinja2's HTML escaping."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format: str) -> str:
    """The current local time, formatted (templates use it for "Today's date")."""
    return datetime.now().strftime(format)
