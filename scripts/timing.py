"""Timing helpers shared by the benchmark scripts (imported as a sibling module: scripts/ is on sys.path when a
script in it runs)."""

from __future__ import annotations

import statistics
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


def print_medians(times: Mapping[str, list[float]], ratios: Mapping[str, list[float]], p95: bool = False) -> None:
    """A line per renderer: its median time (and p95), and for those in `ratios` the median of its ratios."""
    width = max(map(len, times))
    for name, values in times.items():
        line = f"{name:>{width}}: median {statistics.median(values) * 1e6:8.1f} us"
        if p95:
            line += f"  p95 {percentile(values, 0.95) * 1e6:8.1f} us"
        if name in ratios:
            line += f"  ratio vs transformers: median {statistics.median(ratios[name]):.2f}x"
        print(line)
