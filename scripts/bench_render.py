"""`ChatTemplate.render` (polyfills on) against transformers' own rendering, side by side, per engine.

    python scripts/bench_render.py [--repeat 20] [--contexts long_multi_turn] [--isolated]

For each zoo template, the conversation (by default `long_multi_turn`: a system turn and four user turns with tool
calls, tool results and reasoning) is rendered interleaved by transformers' `render_jinja_template` and by
`ChatTemplate.render` on each engine (templates compiled and Caps detected beforehand, as a server would), keeping the
best of `repeat` runs. Pairs transformers cannot render are skipped. Printed: median render time per renderer and the
median of the per-template ratios against transformers. Targets (issue 4): jinja2 <= 1.0x, minijinja <= 0.3x.
`--isolated` adds minijinja with `Limits(isolate=True)` (each render in a worker process; docs/security.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
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
    parser.add_argument("--contexts", default="long_multi_turn", help="comma-separated context names, or 'all'")
    parser.add_argument("--isolated", action="store_true", help="also time minijinja with Limits(isolate=True)")
    args = parser.parse_args()
    contexts = [c for c in load_contexts() if args.contexts == "all" or c.name in args.contexts.split(",")]
    warnings.simplefilter("ignore")
    setups: dict[str, tuple[EngineName, Limits]] = {engine: (engine, Limits()) for engine in ENGINE_NAMES}
    if args.isolated:
        setups["minijinja-isolated"] = ("minijinja", Limits(isolate=True))
    times: dict[str, list[float]] = {"transformers": [], **{name: [] for name in setups}}
    ratios: dict[str, list[float]] = {name: [] for name in setups}
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
                for fn in calls.values():
                    fn()
            except Exception:  # either side failing leaves nothing to compare
                continue
            record(interleaved_best(calls, args.repeat), times, ratios)
    print(f"{len(times['transformers'])} (template, context) pairs, best of {args.repeat} runs each, interleaved")
    print_medians(times, ratios)


if __name__ == "__main__":
    main()
