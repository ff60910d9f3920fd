"""Timing helpers shared by the benchmark scripts (imported as a sibling module: scripts/ is on sys.path when a
script in it runs)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypedDict


class Tokens(TypedDict):
    bos_token: str
    eos_token: str


TOKENS: Tokens = {"bos_token": "<s>", "eos_token": "</s>"}
"""The special tokens every benchmark renders with (typed, so that `**TOKENS` type-checks as keyword arguments)."""


def percentile(values: list[float], q: float) -> float:
    """The value at fraction `q` of the sorted values (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def interleaved_best(calls: Mapping[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Each call's best time of `repeat` runs, the calls taking turns in one loop so that machine load hits them
    alike: the fair way to compare renderers side by side."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeat):
        for name, fn in calls.items():
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def record(best: Mapping[str, float], times: dict[str, list[float]], ratios: dict[str, list[float]]) -> None:
    """Add one side-by-side measurement: every renderer's time, and for those in `ratios`, its time over
    transformers'."""
    for name, seconds in best.items():
        times[name].append(seconds)
        if name in ratios:
            ratios[name].append(seconds / best["transformers"])
