"""List every zoo x context case where minijinja's render differs from transformers', grouped by what differs.

    python scripts/minijinja_report.py [--json]

The groups feed docs/engines.md; the rate is the figure tests/data/minijinja_parity.json holds as a floor.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # transformers_reference.py

import orjson
from transformers_reference import reference_render

from chatcaps.contexts import load_contexts
from chatcaps.outcome import Outcome, engine_render
from chatcaps.zoo import load_zoo


def difference(reference: Outcome, got: Outcome) -> str | None:
    """A short, groupable description of how `got` differs from `reference`, or None when they agree."""
    if reference.raised:
        return None if got.raised else f"transformers raises ({reference.error_type}), minijinja renders"
    if got.raised:
        detail = str(got.error).splitlines()[0]
        return "minijinja raises: " + re.sub(r"`[^`]*`|'[^']*'|\d+", "…", detail)[:120]
    assert reference.output is not None and got.output is not None
    if got.output == reference.output:
        return None
    at = next((i for i, (a, b) in enumerate(zip(reference.output, got.output, strict=False)) if a != b), None)
    if at is None:
        at = min(len(reference.output), len(got.output))
    return f"output differs: transformers {reference.output[at : at + 40]!r} vs minijinja {got.output[at : at + 40]!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args()
    groups: dict[str, list[str]] = defaultdict(list)
    total = 0
    for template in load_zoo():
        source = template.read()
        tokens = {"bos_token": template.bos_token, "eos_token": template.eos_token}
        for context in load_contexts():
            total += 1
            reference = reference_render(source, context, **tokens)
            cause = difference(reference, engine_render(source, context, engine="minijinja", **tokens))
            if cause is not None:
                groups[cause].append(f"{template.file}:{context.name}")
    differing = sum(len(cases) for cases in groups.values())
    summary = {"cases": total, "agree": total - differing, "rate": round((total - differing) / total, 4)}
    if args.json:
        sys.stdout.write(orjson.dumps({"summary": summary, "groups": groups}, option=orjson.OPT_INDENT_2).decode())
        return
    for cause, cases in sorted(groups.items(), key=lambda item: -len(item[1])):
        templates = sorted({case.split(":")[0] for case in cases})
        print(f"{len(cases):5d} cases, {len(templates):3d} templates  {cause}")
        print("      " + ", ".join(templates[:6]) + (" ..." if len(templates) > 6 else ""))
    print(f"minijinja parity: {summary['agree']}/{summary['cases']} = {summary['rate']}")


if __name__ == "__main__":
    main()
