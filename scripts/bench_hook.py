"""Time to first render through the pre-render hook, and its cost per request, over the zoo, per engine.

    python scripts/bench_hook.py [--repeat 20]

The request is the `long_multi_turn` context as an OpenAI chat-completions body with `reasoning_effort: "low"`.
"First render" is what a server pays when a model is loaded without a warm Caps cache: `ChatTemplate(...)` (compile),
Caps detection (no memory or disk cache) and one `prerender`. "Per request" is the best of `repeat` later calls,
printed against `ChatTemplate.render` on the same input, to show what the hook's own parsing adds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from functools import partial

os.environ["CHATCAPS_CACHE_DIR"] = ""  # no disk cache: every first render detects afresh

from timing import TOKENS, interleaved_best, percentile

from chatcaps import ChatcapsError, ChatTemplate
from chatcaps.contexts import load_contexts
from chatcaps.detect import _detect
from chatcaps.engines import ENGINE_NAMES
from chatcaps.hook import prerender
from chatcaps.zoo import load_zoo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    context = next(c for c in load_contexts() if c.name == "long_multi_turn")
    messages, tools = list(context.messages), context.tools
    body = {"model": "m", "messages": messages, "tools": tools, "reasoning_effort": "low"}
    warnings.simplefilter("ignore")
    for engine in ENGINE_NAMES:
        first: list[float] = []
        hook: list[float] = []
        direct: list[float] = []
        for source in load_zoo():
            _detect.cache_clear()  # the in-memory Caps (an lru_cache); the disk cache is off above
            started = time.perf_counter()
            template = ChatTemplate(source.read(), engine=engine, **TOKENS)
            try:
                prerender(body, template)
            except ChatcapsError:
                continue  # the template cannot render this request at all
            first.append(time.perf_counter() - started)
            best = interleaved_best(
                {
                    "hook": partial(prerender, body, template),
                    "render": partial(template.render, messages, tools=tools, reasoning="low"),
                },
                args.repeat,
            )
            hook.append(best["hook"])
            direct.append(best["render"])
        print(
            f"{engine:>9}: {len(first)} templates; first render median {statistics.median(first) * 1e3:.1f} ms, "
            f"p95 {percentile(first, 0.95) * 1e3:.1f} ms, max {max(first) * 1e3:.1f} ms; per request "
            f"median {statistics.median(hook) * 1e6:.0f} us (render() alone {statistics.median(direct) * 1e6:.0f} us)"
        )


if __name__ == "__main__":
    main()
