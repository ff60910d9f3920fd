"""`LastUsed`: the one small cache every bounded memo in chatcaps keeps (a template's generation prompts, the
playground's templates, an isolated worker's compiled templates): the `size` most recently used entries, thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

_K = TypeVar("_K")
_V = TypeVar("_V")


class LastUsed(Generic[_K, _V]):
    """A thread-safe mapping that keeps its `size` most recently used entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: _K) -> _V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: _K, value: _V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
