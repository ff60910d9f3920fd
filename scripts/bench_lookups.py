"""What minijinja-py charges per data lookup, for plain dicts, chatcaps' read-only copies and a bare dict subclass.

    python scripts/bench_lookups.py [--repeat 7] [--messages 20]

Why minijinja stays above 0.8x transformers on tool-heavy conversations (issue 14, docs/engines.md) comes down to
these figures: minijinja-py has a fast path for exact `dict` and `list` only, and chatcaps cannot hand a template
those (their `get`, `setdefault` and `extend` would let it grow a list without bound). Three tiny templates run over
a chat of `--messages` two-key messages, each given the same messages three ways:

- `loop`: a for-loop that reads nothing; per message, the cost of wrapping one dict for minijinja.
- `hits`: four lookups of keys the messages have (`m.role`, `m.content`, twice), over the loop's cost.
- `misses`: two `is defined` tests of keys they lack (`m.tool_calls`, `m.name`), over the loop's cost.

Each figure is the best of `--repeat` rounds, the nine pairs taking turns in each, after one round not counted. On a
shared 2-core machine whole runs differ by up to 1.5x; compare the kinds within one run. Run it after a minijinja
upgrade: a release that reads dict subclasses as fast as dicts would close most of the gap.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import time
from typing import Any

import minijinja

from chatcaps.engines.minijinja_engine import read_only

TEMPLATES = {
    "loop": "{% for m in messages %}{% endfor %}",
    "hits": "{% for m in messages %}{{ m.role }}{{ m.content }}{{ m.role }}{{ m.content }}{% endfor %}",
    "misses": "{% for m in messages %}{% if m.tool_calls is defined %}x{% endif %}"
    "{% if m.name is defined %}y{% endif %}{% endfor %}",
}
HITS_PER_MESSAGE = 4
MISSES_PER_MESSAGE = 2


class _Subclass(dict[str, Any]):
    """A dict subclass that hides nothing: what minijinja-py's generic path costs without chatcaps' methods."""

    __slots__ = ()


def _best(
    env: minijinja.Environment, kinds: dict[str, Any], repeat: int, calls: int = 1000
) -> dict[tuple[str, str], float]:
    """Per (kind, template), the best per-render time of `repeat` rounds of `calls` renders, in microseconds; the
    pairs take turns within each round, so that a change in machine load hits them alike."""
    best = dict.fromkeys(((kind, name) for kind in kinds for name in TEMPLATES), float("inf"))
    for round_ in range(repeat + 1):
        for kind, name in best:
            messages = kinds[kind]
            started = time.perf_counter()
            for _ in range(calls):
                env.render_template(name, messages=messages)
            if round_:  # the first round warms up
                best[kind, name] = min(best[kind, name], (time.perf_counter() - started) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--messages", type=int, default=20)
    args = parser.parse_args()
    env = minijinja.Environment(templates=TEMPLATES)
    plain = [{"role": "user", "content": f"hello {index}"} for index in range(args.messages)]
    kinds = {"plain dicts": plain, "read-only copies": read_only(plain), "dict subclass": [_Subclass(m) for m in plain]}
    count = args.messages
    version = importlib.metadata.version("minijinja")
    print(f"minijinja {version}, {count} messages, best of {args.repeat} rounds; microseconds")
    best = _best(env, kinds, args.repeat)
    for kind in kinds:
        loop, hits, misses = best[kind, "loop"], best[kind, "hits"], best[kind, "misses"]
        print(
            f"{kind:17} per message {loop / count:5.2f} | per hit {(hits - loop) / (count * HITS_PER_MESSAGE):5.2f}"
            f" | per miss {(misses - loop) / (count * MISSES_PER_MESSAGE):5.2f}"
        )


if __name__ == "__main__":
    main()
