"""Render time per engine, side by side with transformers, over the zoo x the canonical contexts.

    python scripts/bench_engines.py [--repeat 20] [--contexts simple,long_multi_turn]

For every (template, context) pair that transformers renders, the three renderers run interleaved in the same loop
(transformers' `render_jinja_template`, chatcaps jinja2, chatcaps minijinja; templates compiled once, as all three
cache compilation), and the best-of-`repeat` time of each is kept. Printed: median and p95 per renderer, and the
median of the per-pair ratios against transformers. Compile time is reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # transformers_reference.py

from timing import TOKENS, interleaved_best, print_medians, record
from transformers_reference import reference_call

from chatcaps.contexts import Context, load_contexts
from chatcaps.engines import ENGINE_NAMES, Renderer, compile_template
from chatcaps.errors import ChatcapsError
from chatcaps.outcome import engine_call
from chatcaps.zoo import load_zoo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--contexts", default="", help="comma-separated context names (default: all)")
    args = parser.parse_args()
    wanted = set(filter(None, args.contexts.split(",")))
    contexts = [context for context in load_contexts() if not wanted or context.name in wanted]
    warnings.simplefilter("ignore")

    times: dict[str, list[float]] = {"transformers": [], **{engine: [] for engine in ENGINE_NAMES}}
    ratios: dict[str, list[float]] = {engine: [] for engine in ENGINE_NAMES}
    compile_times: dict[str, list[float]] = {engine: [] for engine in ENGINE_NAMES}
    for template in load_zoo():
        source = template.read()
        renderers: dict[str, Renderer] = {}
        for engine in ENGINE_NAMES:
            started = time.perf_counter()
            try:
                renderers[engine] = compile_template(source, engine=engine)
            except ChatcapsError:
                continue
            compile_times[engine].append(time.perf_counter() - started)
        for context in contexts:
            pair = _pair(source, context, renderers)
            if pair is None:
                continue
            record(interleaved_best(pair, args.repeat), times, ratios)

    print(f"{len(times['transformers'])} (template, context) pairs, best of {args.repeat} runs each, interleaved")
    print_medians(times, ratios, p95=True)
    for name, values in compile_times.items():
        print(f"{name:>12}: compile median {statistics.median(values) * 1e3:6.2f} ms over {len(values)} templates")


def _pair(source: str, context: Context, renderers: dict[str, Renderer]) -> dict[str, Callable[[], object]] | None:
    """The three renders of one pair, or None when transformers cannot render it (nothing to compare)."""
    reference = reference_call(source, context, **TOKENS)
    try:
        reference()
    except Exception:
        return None
    pair: dict[str, Callable[[], object]] = {"transformers": reference}
    for engine, renderer in renderers.items():
        render = engine_call(renderer, context, **TOKENS)
        try:
            render()
        except ChatcapsError:
            continue
        pair[engine] = render
    return pair


if __name__ == "__main__":
    main()
