"""The figures of docs/security.md: the escape corpus, the exhaustion cases and a fuzz run, as markdown tables.

    python scripts/security_report.py [--fuzz-examples 100] [--skip-fuzz] [--detection-only]

Runs the same data as tests/security/ (payloads.json, exhaustion.json, strategies_hostile.py), with the default
`Limits` (the tests use a 1 s render budget to save time), in three setups (jinja2; minijinja in-process, the
`Limits(isolate=False)` opt-in; minijinja isolated, its default): every payload through three entry points; every
exhaustion case in a child process (wall time and peak resident memory of the render); hostile requests through
every zoo template via `ChatTemplate.render` and `hook.prerender`; `ChatTemplate.render` on the hostile templates
of detection.json, which detection stops at their first limit (`--detection-only` prints just that table: run it with
`PYTHONPATH=<older checkout>/src` for the figures before a change). Needs the zoo (scripts/fetch_zoo.py).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["CHATCAPS_CACHE_DIR"] = ""  # every detection runs its probes
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hypothesis import HealthCheck, given, settings
from security.harness import (
    EXHAUSTION,
    PAYLOADS,
    SETUPS,
    Measurement,
    acceptable,
    configure,
    expected,
    leaks,
    payload_source,
    plant_canaries,
    run_case,
    short_conversation,
)
from security.strategies_hostile import hostile_render_calls, hostile_request_bodies

from chatcaps import ChatTemplate, RenderLimitError, detect_caps
from chatcaps.engines import DEFAULT_LIMITS, compile_template
from chatcaps.errors import ChatcapsError
from chatcaps.hook import prerender
from chatcaps.zoo import load_zoo


def header() -> str:
    cpu = platform.processor() or platform.machine()
    return (
        f"Measured {date.today().isoformat()} on {platform.system()} {platform.machine()} ({cpu}), "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, default Limits."
    )


def corpus(canary: Path) -> str:
    """Each payload in every setup through three entry points: how each attempt ended."""
    entries: dict[str, Callable[[str, str], Any]] = {
        "compile + render": lambda source, setup: compile_template(source, **_engine_limits(setup)).render(
            {"messages": short_conversation(), "tools": None}
        ),
        "ChatTemplate.render": lambda source, setup: (
            ChatTemplate(source, **_engine_limits(setup)).render(short_conversation()).prompt
        ),
        "detect_caps": lambda source, setup: detect_caps(source, **_engine_limits(setup)).to_json().decode(),
    }
    counts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    escaped: list[str] = []
    for payload in PAYLOADS:
        source = payload_source(payload, canary)
        for setup in SETUPS:
            for entry, run in entries.items():
                messages = short_conversation()
                before = copy.deepcopy(messages)
                try:
                    text, outcome = str(run(source, setup)), "inert output"
                except ChatcapsError as error:
                    text, outcome = str(error), type(error).__name__
                if leaks(text) or messages != before:
                    escaped.append(f"{payload['name']} / {setup} / {entry}")
                    outcome = "ESCAPED"
                counts[(setup, entry)][outcome] += 1
    outcomes = sorted({outcome for counter in counts.values() for outcome in counter})
    lines = [
        f"{len(PAYLOADS)} payloads in {len({p['category'] for p in PAYLOADS})} categories; "
        f"{sum(sum(c.values()) for c in counts.values())} attempts; escaped: {len(escaped)}"
        + (f" ({', '.join(escaped)})" if escaped else ""),
        "",
        "| setup | entry point | " + " | ".join(outcomes) + " |",
        "|---|---|" + "---|" * len(outcomes),
    ]
    for (name, entry), counter in counts.items():
        lines.append(f"| {name} | {entry} | " + " | ".join(str(counter[outcome]) for outcome in outcomes) + " |")
    return "\n".join(lines)


def _engine_limits(setup: str) -> dict[str, Any]:
    engine, limits = configure(setup)
    return {"engine": engine, "limits": limits}


def exhaustion() -> str:
    """Every case in every setup, two children at a time, with the default 2 s budget."""
    jobs = [(case, setup) for case in EXHAUSTION for setup in SETUPS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results: list[Measurement] = list(pool.map(lambda job: run_case(job[0], job[1]), jobs))
    by_case: dict[str, dict[str, Measurement]] = collections.defaultdict(dict)
    for measured in results:
        by_case[measured.case][measured.setup] = measured
    unexpected = [
        f"{m.case}/{m.setup}: {m.outcome}"
        for (case, setup), m in zip(jobs, results, strict=True)
        if not acceptable(m.outcome, case, setup)
    ]
    moved = [
        f"{m.case}/{m.setup}: {m.outcome}"
        for (case, setup), m in zip(jobs, results, strict=True)
        if acceptable(m.outcome, case, setup) and m.outcome not in expected(case, setup)
    ]
    lines = [
        f"{len(EXHAUSTION)} cases x {len(SETUPS)} setups; time_s={DEFAULT_LIMITS.time_s}, "
        f"max_memory_bytes={DEFAULT_LIMITS.max_memory_bytes}; not acceptable: {unexpected or 'none'}; "
        f"another limit than documented (the engine's choice): {moved or 'none'}",
        "",
        "| case | " + " | ".join(f"{setup} | time | peak MB" for setup in SETUPS) + " |",
        "|---|" + "---|---|---|" * len(SETUPS),
    ]
    for case in EXHAUSTION:
        cells = []
        for setup in SETUPS:
            m = by_case[case["name"]][setup]
            crashed = m.outcome == "crash"
            cells += [m.outcome, "-" if crashed else f"{m.seconds:.2f} s", "-" if crashed else f"{m.peak_mb:.0f}"]
        lines.append(f"| {case['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fuzz(examples: int) -> str:
    """Hostile requests through every zoo template and both entry points, in each setup."""
    zoo = load_zoo()
    lines = [
        "| setup | examples | calls | typed errors | results | other exceptions | slowest call |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for setup in SETUPS:
        templates = [
            ChatTemplate(item.read(), bos_token=item.bos_token, eos_token=item.eos_token, **_engine_limits(setup))
            for item in zoo
        ]
        for template in templates:
            template.caps  # noqa: B018 - detected before the timed calls
        tally = _Tally(templates)
        settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(given(call=hostile_render_calls(), body=hostile_request_bodies())(tally.example))()
        counts = tally.counts
        lines.append(
            f"| {setup} | {tally.examples} | {sum(counts.values())} | {counts['typed']} | {counts['result']} | "
            f"{counts['other']} | {tally.slowest * 1000:.0f} ms |"
        )
        notes.append(f"{setup} errors by type: " + ", ".join(f"{k} {n}" for k, n in tally.kinds.most_common()))
    return "\n".join([*lines, "", *notes])


class _Tally:
    """Runs one hostile example through every template and counts how each call ended."""

    def __init__(self, templates: list[ChatTemplate]) -> None:
        self.templates = templates
        self.counts: collections.Counter[str] = collections.Counter()
        self.kinds: collections.Counter[str] = collections.Counter()
        self.slowest = 0.0
        self.examples = 0

    def example(self, call: dict[str, Any], body: Any) -> None:
        self.examples += 1
        for template in self.templates:
            for entry in ("render", "prerender"):
                started = time.perf_counter()
                try:
                    template.render(**call) if entry == "render" else prerender(body, template)
                    self.counts["result"] += 1
                except ChatcapsError as error:
                    self.counts["typed"] += 1
                    self.kinds[type(error).__name__] += 1
                except Exception as error:
                    self.counts["other"] += 1
                    self.kinds[f"UNTYPED {type(error).__name__}"] += 1
                self.slowest = max(self.slowest, time.perf_counter() - started)


DETECTION = json.loads((Path(__file__).resolve().parents[1] / "tests" / "security" / "detection.json").read_text())


def detection() -> str:
    """`ChatTemplate(source).render(...)` on each hostile template of detection.json, timed from the call (compile and
    detection included). Isolated, a worker is started before the clock, as a server's pool is warm."""
    lines = ["| template | " + " | ".join(f"{setup} | time" for setup in SETUPS) + " |", "|---|" + "---|---|" * 3]
    for case in DETECTION:
        cells = []
        for setup in SETUPS:
            engine, limits = configure(setup)
            if limits.isolate:
                compile_template("{{ 1 }}", engine=engine, limits=limits).render({})
            started = time.perf_counter()
            try:
                ChatTemplate(case["template"], engine=engine, limits=limits).render(short_conversation())
                outcome = "ok"
            except RenderLimitError as error:
                outcome = f"limit:{error.limit}"
            except ChatcapsError as error:
                outcome = f"error:{type(error).__name__}"
            cells += [outcome, f"{time.perf_counter() - started:.2f} s"]
        lines.append(f"| {case['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fuzz-examples", type=int, default=100)
    parser.add_argument("--skip-fuzz", action="store_true")
    parser.add_argument("--detection-only", action="store_true", help="only the hostile-template detection table")
    args = parser.parse_args()
    print(header())
    if not args.detection_only:
        with tempfile.TemporaryDirectory() as folder:
            canary = plant_canaries(Path(folder))
            print("\n### Escape corpus\n\n" + corpus(canary))
        print("\n### Exhaustion\n\n" + exhaustion())
    print(f"\n### Hostile templates through ChatTemplate.render (time_s={DEFAULT_LIMITS.time_s})\n\n" + detection())
    if not (args.skip_fuzz or args.detection_only):
        print("\n### Hostile requests\n\n" + fuzz(args.fuzz_examples))


if __name__ == "__main__":
    main()
