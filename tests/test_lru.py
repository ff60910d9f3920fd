"""`chatcaps.lru.LastUsed`: the most recently used entries kept, the oldest dropped."""

from __future__ import annotations

from chatcaps.lru import LastUsed


def test_the_least_recently_used_goes_first() -> None:
    kept: LastUsed[str, int] = LastUsed(2)
    kept.put("a", 1)
    kept.put("b", 2)
    assert kept.get("a") == 1  # "a" is now the newer
    kept.put("c", 3)
    assert (kept.get("b"), kept.get("a"), kept.get("c"), len(kept)) == (None, 1, 3, 2)
    kept.put("a", 4)
    assert (kept.get("a"), len(kept)) == (4, 2)
