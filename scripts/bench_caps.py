"""Time detect_caps over the zoo, per engine: cold (compile + every probe, no cache) and warm (cached lookup).

    python scripts/bench_caps.py [--engine jinja2|minijinja] [--repeat 3]

Cold is the best of `repeat` runs per template, each from scratch (memory cache and compiled templates cleared), so
that a spike of load on a shared machine does not count as the template's time.

Targets (issue 3): minijinja median cold <= 5 ms, jinja2 median cold <= 40 ms, warm <= 20 us. Issue 17: minijinja
median <= 3 ms, jinja2 <= 15 ms, p95 within 3x the median, warm < 1 us.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["CHATCAPS_CACHE_DIR"] = ""  # cold means probed: no disk cache

from timing import percentile

from chatcaps import detect_caps
from chatcaps.detect import _detect
from chatcaps.engines import ENGINE_NAMES, compile_template
from chatcaps.zoo import load_zoo


def _figures(samples: list[float], unit: float) -> str:
    p95 = percentile(samples, 0.95)
    return f"median {statistics.median(samples) / unit:.2f}, p95 {p95 / unit:.2f}, max {max(samples) / unit:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=ENGINE_NAMES, action="append")
    parser.add_argument("--repeat", type=int, default=3, help="cold runs per template, the best kept (default 3)")
    args = parser.parse_args()
    texts = [template.read() for template in load_zoo()]
    for engine in args.engine or ENGINE_NAMES:
        cold = [float("inf")] * len(texts)
        for _ in range(args.repeat):
            _detect.cache_clear()  # the in-memory Caps (an lru_cache); the disk cache is off above
            compile_template.cache_clear()
            for index, text in enumerate(texts):
                start = time.perf_counter()
                detect_caps(text, engine=engine)
                cold[index] = min(cold[index], time.perf_counter() - start)
        warm = []
        for text in texts:
            start = time.perf_counter()
            for _ in range(100):
                detect_caps(text, engine=engine)
            warm.append((time.perf_counter() - start) / 100)
        print(f"{engine:9} cold ms: {_figures(cold, 1e-3)} | warm us: {_figures(warm, 1e-6)}  ({len(texts)} templates)")


if __name__ == "__main__":
    main()
