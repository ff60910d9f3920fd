"""The sampling proof of tests/reply/test_constraint_sampling.py at full size: every zoo template with a call
format, each choice (`required`, named, `auto`, `none`), `--walks` random texts drawn from each grammar by
llguidance's matcher and as many by llama.cpp's grammar sampler, every llguidance text also judged by llama.cpp's
engine; prints how many texts ended, and every one that did not read back into valid calls (none expected).

    python scripts/bench_constrained_sampling.py [--walks 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "reply")]

from gbnf_judge import Judge  # noqa: E402
from grammar_sampler import Engine, LlamaCpp, Llguidance  # noqa: E402
from test_constraint_sampling import sample_zoo  # noqa: E402

from chatcaps.zoo import load_zoo  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--walks", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from tiny_model import tiny_model_dir
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    judge = Judge(Path(tempfile.mkdtemp()))
    zoo = load_zoo()
    runs: list[tuple[str, Engine, Judge | None]] = [
        ("llguidance", Llguidance(tokenizer), judge),
        ("llama.cpp", LlamaCpp(judge), None),
    ]
    for name, engine, judged in runs:
        start = time.perf_counter()
        tally = sample_zoo(zoo, {name: (engine, args.walks)}, seed=args.seed, judge=judged)
        spent = time.perf_counter() - start
        ended, unended = sum(tally.ended.values()), sum(tally.unended.values())
        print(f"{name}: {ended} texts ended ({unended} walks given up) in {spent:.0f} s; {len(tally.wrong)} wrong")
        print(f"  ended by choice: {dict(tally.ended)}")
        for wrong in tally.wrong:
            print(f"  {wrong}")
    judge.close()


if __name__ == "__main__":
    main()
