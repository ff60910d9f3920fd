"""What keeping a model to its call format costs: the grammar's build time per request (built once per template,
tools list and choice, then cached) and llama-server's tokens per second with and without the grammar, side by side.

Build: `chatcaps.reply.constraint.constraint` for tools lists of 1, 8 and 32 tools (four parameters each), on the
tiny model's template and, where the zoo is found (`CHATCAPS_ZOO`), three more formats; a first call builds (each
call gets tools of new names), a second with the same tools is the cache. Generation: the tiny trained GGUF behind a
real llama-server (tests/llama_server_harness.py, one thread), the same prompt sent to `/completion` with no
grammar and with each grammar, `--runs` times with different seeds; tokens per second is llama-server's own
`timings.predicted_per_second`. Prints a Markdown table for docs/constrained.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chatcaps import ChatTemplate
from chatcaps.reply.constraint import constraint
from chatcaps.zoo import load_zoo, zoo_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from llama_server_harness import post_json, start_llama_server
from paths import DATA
from tiny_model import TEMPLATE_FILE, tiny_gguf

REQUEST: dict[str, Any] = json.loads((DATA / "constrained_request.json").read_text("utf-8"))
ASK: Any = REQUEST["ask"]
CONVERT: Any = REQUEST["convert"]
ZOO_FORMATS = (
    "llamacpp__NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "llamacpp__Qwen3-Coder.jinja",
    "mistralai__mistral-common__v13.jinja",
)
ANSWER = {
    "type": "json_schema",
    "json_schema": {
        "name": "money",
        "schema": {"type": "object", "properties": {"usd": {"type": "number"}}, "required": ["usd"]},
    },
}


def tools(count: int, tag: str) -> list[dict[str, Any]]:
    kinds = ("string", "integer", "number", "boolean")
    properties = {f"p{at}": {"type": kind} for at, kind in enumerate(kinds)}
    parameters = {"type": "object", "properties": properties, "required": ["p0"]}
    return [
        {"type": "function", "function": {"name": f"tool_{tag}_{at}", "parameters": parameters}} for at in range(count)
    ]


def templates() -> dict[str, ChatTemplate]:
    found = {"tiny (Hermes-like JSON)": ChatTemplate(TEMPLATE_FILE.read_text("utf-8"))}
    if zoo_dir() is not None:
        for entry in load_zoo():
            if entry.file in ZOO_FORMATS:
                found[entry.file] = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
    return found


def build_times(rounds: int) -> None:
    print("| template | tools | first build (ms) | cached (ms) |\n|---|---:|---:|---:|")
    for name, template in templates().items():
        detected = template.caps  # detected once, outside the timing
        for count in (1, 8, 32):
            first, cached = [], []
            for round_ in range(rounds):
                listed = tools(count, f"{count}x{round_}")
                start = time.perf_counter()
                constraint(detected, listed, "required")
                middle = time.perf_counter()
                constraint(detected, listed, "required")
                first.append(middle - start)
                cached.append(time.perf_counter() - middle)
            built, hit = statistics.median(first) * 1e3, statistics.median(cached) * 1e3
            print(f"| {name} | {count} | {built:.1f} | {hit:.3f} |")


def speeds(runs: int) -> None:
    template = ChatTemplate(TEMPLATE_FILE.read_text("utf-8"))
    render = template.render(ASK, tools=[CONVERT], reasoning="off")
    choices: dict[str, dict[str, Any]] = {"no grammar": {}}
    for label, choice, response_format in (
        ("required", "required", None),
        ("lazy (auto)", "auto", None),
        ("json_schema", "none", ANSWER),
    ):
        found = constraint(
            template.caps,
            [CONVERT] if label != "json_schema" else None,
            choice if label != "json_schema" else None,
            response_format=response_format,
            prompt=render.prompt,
        )
        assert found is not None
        choices[label] = found.completion_fields()
    folder = Path(tempfile.mkdtemp(prefix="bench-constrained-"))
    server = start_llama_server(tiny_gguf(), log=folder / "llama-server.log")
    try:
        print("\n| grammar | tokens/s (median) | tokens per reply (median) |\n|---|---:|---:|")
        for label, fields in choices.items():
            rates, counts = [], []
            for seed in range(runs):
                body = {"prompt": render.prompt, "n_predict": 96, "temperature": 0.8, "seed": seed, **fields}
                reply = post_json(f"{server.url}/completion", body)
                rates.append(reply["timings"]["predicted_per_second"])
                counts.append(reply["tokens_predicted"])
            print(f"| {label} | {statistics.median(rates):.0f} | {statistics.median(counts):.0f} |")
        reply = post_json(
            f"{server.url}/completion",
            {"prompt": render.prompt, "n_predict": 96, "temperature": 0.0, "seed": 0, **choices["required"]},
        )
        print(f"\nthe tiny model under `required` (greedy): {reply['content']!r}")
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="builds per template and tools count")
    parser.add_argument("--runs", type=int, default=20, help="completions per grammar")
    args = parser.parse_args()
    build_times(args.rounds)
    speeds(args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
