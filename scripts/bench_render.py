"""`ChatTemplate.render` (polyfills on) against transformers' own rendering, side by side, per engine.

    python scripts/bench_render.py [--repeat 20] [--contexts all | NAME,NAME...] [--isolated]

For each zoo template and each context (by default every canonical context in contexts/*.json; `long_multi_turn` is
a system turn and four user turns with tool calls, tool results and reasoning, `simple` one user turn), the
conversation is rendered interleaved by transformers' `render_jinja_template` and by `ChatTemplate.render` on each
engine (templates compiled and Caps detected beforehand, as a server would), keeping the best of `repeat` runs. Pairs
transformers cannot render are skipped. Printed: per context, the median of the per-template ratios against
transformers for each engine; the same split by whether the polyfills changed the input; then over all pairs, the
median render time per renderer and the median ratio.
Targets (issue 14): jinja2 <= 1.0x and minijinja <= 0.8x on every context.
minijinja is timed in-process (`Limits(isolate=False)`: the zoo is vetted), as a server that trusts its templates
renders; `--isolated` adds minijinja isolated, its default for untrusted templates on POSIX (each render in a worker
process; docs/security.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

os.environ.setdefault("CHATCAPS_CACHE_DIR", "")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # transformers_reference.py

from timing import TOKENS, interleaved_best, print_medians, record
from transformers_reference import reference_call

from chatcaps import ChatTemplate, Limits
from chatcaps.contexts import Context, load_contexts
from chatcaps.engines import ENGINE_NAMES, EngineName
from chatcaps.zoo import load_zoo


def ours(template: ChatTemplate, context: Context) -> Callable[[], object]:
    messages, tools = list(context.messages), None if context.tools is None else list(context.tools)

    def render() -> object:
        return template.render(
            messages,
            tools=tools,
            reasoning=context.reasoning,  # type: ignore[arg-type]
            template_args=context.template_args,
            add_generation_prompt=context.add_generation_prompt,
            continue_final_message=context.continue_final_message,
        )

    return render


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--contexts", default="all", help="comma-separated context names, or 'all' (the default)")
    parser.add_argument("--isolated", action="store_true", help="also time minijinja with Limits(isolate=True)")
    args = parser.parse_args()
    contexts = [c for c in load_contexts() if args.contexts == "all" or c.name in args.contexts.split(",")]
    warnings.simplefilter("ignore")
    setups: dict[str, tuple[EngineName, Limits]] = {engine: (engine, Limits(isolate=False)) for engine in ENGINE_NAMES}
    if args.isolated:
        setups["minijinja-isolated"] = ("minijinja", Limits(isolate=True))
    times: dict[str, list[float]] = {"transformers": [], **{name: [] for name in setups}}
    ratios: dict[str, list[float]] = {name: [] for name in setups}
    by_context = {context.name: {name: list[float]() for name in setups} for context in contexts}
    by_work = {work: {name: list[float]() for name in setups} for work in ("unchanged", "changed")}
    for source in load_zoo():
        text = source.read()
        templates = {
            name: ChatTemplate(text, engine=engine, limits=limits, **TOKENS)
            for name, (engine, limits) in setups.items()
        }
        for template in templates.values():
            template.caps  # noqa: B018 - detected once, before timing, as a server does at load
        for context in contexts:
            calls: dict[str, Callable[[], object]] = {"transformers": reference_call(text, context, **TOKENS)}
            calls.update({name: ours(template, context) for name, template in templates.items()})
            try:
                results = {name: fn() for name, fn in calls.items()}
            except Exception:  # either side failing leaves nothing to compare
                continue
            best = interleaved_best(calls, args.repeat)
            record(best, times, ratios)
            record(best, {name: [] for name in best}, by_context[context.name])
            for name in setups:
                worked = "changed" if results[name].applied else "unchanged"  # type: ignore[attr-defined]
                by_work[worked][name].append(best[name] / best["transformers"])
    print(f"{len(times['transformers'])} (template, context) pairs, best of {args.repeat} runs each, interleaved")
    print_per_context(by_context)
    print("by what the polyfills did (pairs where they changed the input do work transformers does not):")
    print_per_context({f"input {work}": ratios for work, ratios in by_work.items()})
    print_medians(times, ratios)


def print_per_context(by_context: Mapping[str, Mapping[str, list[float]]]) -> None:
    """A line per context: how many templates it was timed on, and each engine's median ratio against transformers."""
    width = max(map(len, by_context))
    for name, ratios in by_context.items():
        pairs = len(next(iter(ratios.values())))
        medians = "  ".join(f"{engine} {statistics.median(values):.2f}x" for engine, values in ratios.items() if values)
        print(f"{name:<{width}}  {pairs:>4} pairs  {medians}")


if __name__ == "__main__":
    main()
