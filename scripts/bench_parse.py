"""Time reading a template's source over the zoo: lexing (FastLexer), then parsing with jinja2's `Parser` and with
chatcaps' `FastParser`, side by side.

    python scripts/bench_parse.py [--repeat 20]

Per template, the best of `repeat` runs of each (the two parsers taking turns in one loop), timed apart: the lexing
is the parser's construction (it tokenizes the whole source), the parse is `subparse()` on the token stream, as
`find_candidates` runs it. Printed: median, p95 and max over the zoo, and the median of the per-template ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jinja2.parser
from timing import percentile

from chatcaps.engines.parser import FastParser
from chatcaps.probes.candidates import _ENV
from chatcaps.zoo import load_zoo

PARSERS: dict[str, type[jinja2.parser.Parser]] = {"jinja2": jinja2.parser.Parser, "fast": FastParser}


def _times(parser: type[jinja2.parser.Parser], source: str) -> tuple[float, float]:
    """(lexing, parsing) of one run, in seconds."""
    started = time.perf_counter()
    instance = parser(_ENV, source)
    lexed = time.perf_counter()
    instance.subparse()
    return lexed - started, time.perf_counter() - lexed


def _figures(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples) * 1e3:.3f}, p95 {percentile(samples, 0.95) * 1e3:.3f}, "
        f"max {max(samples) * 1e3:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20, help="runs per template and parser, the best kept")
    args = parser.parse_args()
    sources = [template.read() for template in load_zoo()]
    lexing: list[float] = []
    parsing: dict[str, list[float]] = {name: [] for name in PARSERS}
    for source in sources:
        best_lexing = float("inf")
        best = dict.fromkeys(PARSERS, float("inf"))
        for _ in range(args.repeat):
            for name, parser_class in PARSERS.items():
                lexed, parsed = _times(parser_class, source)
                best_lexing = min(best_lexing, lexed)
                best[name] = min(best[name], parsed)
        lexing.append(best_lexing)
        for name, seconds in best.items():
            parsing[name].append(seconds)
    print(f"{len(sources)} zoo templates, median {statistics.median(map(len, sources)):.0f} chars; ms:")
    print(f"  lex            {_figures(lexing)}")
    for name, samples in parsing.items():
        print(f"  parse {name:8} {_figures(samples)}")
    ratios = [fast / slow for fast, slow in zip(parsing["fast"], parsing["jinja2"], strict=True)]
    print(f"  fast/jinja2 per template: median {statistics.median(ratios):.2f}, p95 {percentile(ratios, 0.95):.2f}")


if __name__ == "__main__":
    main()
