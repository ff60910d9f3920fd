"""How fast `ChatTemplate.render` on minijinja could ever be: its parts timed apart, side by side with transformers.

    python scripts/bench_floor.py [--repeat 20] [--contexts long_multi_turn]

`bench_render.py` times the whole render. This splits it, per zoo template, into what can and cannot be made
faster, keeping the best of `repeat` interleaved runs of each:

- `transformers`: `render_jinja_template` on the canonical input (the reference, as in bench_render).
- `chatcaps`: `ChatTemplate.render(...)` with polyfills on, on the minijinja engine.
- `engine`: the minijinja renderer alone, given exactly the variables `ChatTemplate.render` gave it (read-only
  copies of Python lists and dicts, which minijinja reads through a call into Python per lookup).
- `native`: the same variables written into the template as minijinja literals (`{% set messages = [...] %}`),
  compiled once beforehand and rendered with no variables: minijinja working on its own values, no Python object
  in sight. Only the filters that must match transformers (`tojson`, `indent`, ...) still call into Python. No
  request can reach minijinja this way for free: minijinja's Python binding takes only Python objects, and
  literals must be compiled per request (an 8-turn Qwen3 chat: 57 us to render, 97 us to compile and render, 120 us
  on the engine's path).

`chatcaps - engine` is the pipeline (validation, polyfills, the plain-data copy, the report); `chatcaps - engine +
native` is the floor: the render if the engine's input cost nothing. Pairs whose `native` prompt differs from the
engine's (a template printing a whole dict, which minijinja's own values print as `{"a": 1}`, not `{'a': 1}`) are
skipped and counted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("CHATCAPS_CACHE_DIR", "")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # transformers_reference.py

from bench_render import ours
from timing import TOKENS, interleaved_best, print_medians, record
from transformers_reference import reference_call

from chatcaps import ChatTemplate
from chatcaps.contexts import Context, load_contexts
from chatcaps.engines import Renderer, compile_template
from chatcaps.zoo import load_zoo


def minijinja_literal(value: Any) -> str:
    """`value` (plain JSON data) as a minijinja expression that evaluates to it; JSON's string escapes are
    minijinja's too. ValueError for what has no literal (a float that is not finite, a non-string key)."""
    if value is None:
        return "none"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(minijinja_literal(item) for item in value) + "]"
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        return "{" + ", ".join(f"{json.dumps(k)}: {minijinja_literal(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no minijinja literal for {type(value).__name__}")


class _Capture:
    """Wraps a renderer for one `ChatTemplate.render` call and keeps the variables it was given."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.variables: Mapping[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.renderer, name)

    def render(self, variables: Mapping[str, Any]) -> str:
        self.variables = variables
        return self.renderer.render(variables)


def engine_variables(template: ChatTemplate, render: Callable[[], object]) -> Mapping[str, Any]:
    """The variables `render` (a `ChatTemplate.render` call) gives the engine."""
    renderer = template.renderer
    capture = _Capture(renderer)
    template.renderer = capture
    try:
        render()
    finally:
        template.renderer = renderer
    return capture.variables


def native_renderer(text: str, variables: Mapping[str, Any]) -> Renderer:
    """The template with `variables` set at its top as minijinja literals (`+%}`: trim_blocks must not eat the
    template's first newline)."""
    sets = "".join(f"{{% set {name} = {minijinja_literal(value)} +%}}" for name, value in variables.items())
    return compile_template(sets + text, engine="minijinja")


def calls(text: str, context: Context) -> dict[str, Callable[[], object]] | str:
    """The four timed calls of one pair, or why there is nothing to compare: "failed" (transformers or chatcaps
    cannot render it) or "differs" (the native prompt is not the engine's)."""
    template = ChatTemplate(text, engine="minijinja", **TOKENS)
    template.caps  # noqa: B018 - detected once, before timing, as a server does at load
    full = ours(template, context)
    reference = reference_call(text, context, **TOKENS)
    try:
        reference()
        variables = engine_variables(template, full)
    except Exception:
        return "failed"
    try:
        native = native_renderer(text, variables)
        if native.render({}) != template.renderer.render(variables):
            return "differs"
    except Exception:
        return "differs"
    return {
        "transformers": reference,
        "chatcaps": full,
        "engine": lambda: template.renderer.render(variables),
        "native": lambda: native.render({}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--contexts", default="long_multi_turn", help="comma-separated context names, or 'all'")
    args = parser.parse_args()
    contexts = [c for c in load_contexts() if args.contexts == "all" or c.name in args.contexts.split(",")]
    warnings.simplefilter("ignore")
    names = ("transformers", "chatcaps", "engine", "native", "pipeline", "floor")
    times: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names[1:]}
    skipped = {"failed": 0, "differs": 0}
    for source in load_zoo():
        text = source.read()
        for context in contexts:
            pair = calls(text, context)
            if isinstance(pair, str):
                skipped[pair] += 1
                continue
            best = dict(interleaved_best(pair, args.repeat))
            best["pipeline"] = best["chatcaps"] - best["engine"]
            best["floor"] = best["pipeline"] + best["native"]
            record(best, times, ratios)
    print(
        f"{len(times['transformers'])} (template, context) pairs on minijinja, best of {args.repeat} runs each, "
        f"interleaved; skipped: {skipped['failed']} that transformers or chatcaps cannot render, "
        f"{skipped['differs']} whose native prompt differs"
    )
    print_medians(times, ratios)


if __name__ == "__main__":
    main()
