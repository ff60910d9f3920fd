"""Time detect_caps over the zoo, per engine: cold (compile + every probe, no cache) and warm (cached lookup).

    python scripts/bench_caps.py [--engine jinja2|minijinja] [--repeat 3] [--tail 10] [--isolated]

Cold is the best of `repeat` runs per template, each from scratch (memory cache and compiled templates cleared), so
that a spike of load on a shared machine does not count as the template's time. Each engine's line also gives the
probe renders one pass over the zoo makes (counted in a separate, untimed pass), and `--tail N` lists the N slowest
templates with their renders per probe family (the part of a probe's name before the first dot). minijinja is timed
in-process (`Limits(isolate=False)`: the zoo is vetted); `--isolated` adds it isolated, its default on POSIX.

Targets (issue 3): minijinja median cold <= 5 ms, jinja2 median cold <= 40 ms, warm <= 20 us. Issue 17: minijinja
median <= 3 ms, jinja2 <= 15 ms, p95 within 3x the median, warm < 1 us.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter
from typing import Any

os.environ["CHATCAPS_CACHE_DIR"] = ""  # cold means probed: no disk cache

from timing import percentile

from chatcaps import detect_caps
from chatcaps.detect import _detect
from chatcaps.engines import ENGINE_NAMES, EngineName, Limits, compile_template
from chatcaps.probes.prober import Prober
from chatcaps.zoo import ZooTemplate, load_zoo


def _figures(samples: list[float], unit: float) -> str:
    p95 = percentile(samples, 0.95)
    return f"median {statistics.median(samples) / unit:.2f}, p95 {p95 / unit:.2f}, max {max(samples) / unit:.2f}"


def _renders(text: str, engine: EngineName) -> Counter[str]:
    """The renders one cold detection makes, per probe family (the method wrapped only for this call)."""
    counts: Counter[str] = Counter()
    attempt = Prober._attempt

    def counted(self: Prober, probe: str, variables: dict[str, Any]) -> Any:
        counts[probe.split(".")[0]] += 1
        return attempt(self, probe, variables)

    _detect.cache_clear()
    Prober._attempt = counted  # type: ignore[method-assign]
    try:
        detect_caps(text, engine=engine, limits=Limits(isolate=False))  # the same renders isolated, counted faster
    finally:
        Prober._attempt = attempt  # type: ignore[method-assign]
    return counts


def _tail(templates: list[ZooTemplate], texts: list[str], cold: list[float], engine: EngineName, count: int) -> None:
    slowest = sorted(range(len(texts)), key=lambda index: -cold[index])[:count]
    for index in slowest:
        counts = _renders(texts[index], engine)
        families = " ".join(f"{family} {number}" for family, number in counts.most_common())
        print(f"  {cold[index] * 1e3:7.2f} ms {counts.total():4} renders  {templates[index].file}: {families}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=ENGINE_NAMES, action="append")
    parser.add_argument("--repeat", type=int, default=3, help="cold runs per template, the best kept (default 3)")
    parser.add_argument("--tail", type=int, default=0, help="list the N slowest templates with their renders")
    parser.add_argument("--isolated", action="store_true", help="also time minijinja with Limits(isolate=True)")
    args = parser.parse_args()
    templates = list(load_zoo())
    texts = [template.read() for template in templates]
    setups: list[tuple[str, EngineName, Limits]] = [(e, e, Limits(isolate=False)) for e in args.engine or ENGINE_NAMES]
    if args.isolated:
        setups.append(("minijinja-isolated", "minijinja", Limits(isolate=True)))
    for label, engine, limits in setups:
        cold = [float("inf")] * len(texts)
        for _ in range(args.repeat):
            _detect.cache_clear()  # the in-memory Caps (an lru_cache); the disk cache is off above
            compile_template.cache_clear()
            for index, text in enumerate(texts):
                start = time.perf_counter()
                detect_caps(text, engine=engine, limits=limits)
                cold[index] = min(cold[index], time.perf_counter() - start)
        warm = []
        for text in texts:
            start = time.perf_counter()
            for _ in range(100):
                detect_caps(text, engine=engine, limits=limits)
            warm.append((time.perf_counter() - start) / 100)
        ratio = percentile(cold, 0.95) / statistics.median(cold)
        renders = sum(_renders(text, engine).total() for text in texts)
        print(
            f"{label:9} cold ms: {_figures(cold, 1e-3)}, p95/median {ratio:.1f} | warm us: {_figures(warm, 1e-6)}"
            f"  ({len(texts)} templates, {renders} renders)"
        )
        _tail(templates, texts, cold, engine, args.tail)


if __name__ == "__main__":
    main()
