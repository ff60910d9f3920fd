"""chatcaps' JSON Schema converter (`chatcaps.reply.json_grammar`) beside the one it replaced (llama-cpp-python's
`SchemaConverter`, the Python port of llama.cpp's converter that llama-cpp-python ships), on the same schemas: the
three agent clients' tools (tests/data/reply/agent_tools.json) and the keyword cases of
tests/data/reply/json_grammar_cases.json.

For each converter: how many schemas it converts (the rest raise), the conversion time, llama.cpp's grammar
setup (`llama_sampler_init_grammar`) and its cost a byte (the grammar sampler's mask over byte tokens, then the
byte accepted, along one valid value), and llguidance's compile and cost a token on the tiny tokenizer (mask and
consume). And the coverage: of the keyword cases' texts, how many each grammar judges as the case says (llama.cpp
judging; a grammar of over 200 kB or a repetition of 10000 or more, as the old converter writes `maxLength:
100000` (800 kB of nested groups), is counted as not converted: llama.cpp crashes reading it). Median of
`--repeat` runs on this machine.

    python scripts/bench_json_grammar.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from gbnf_judge import Judge  # noqa: E402

from chatcaps.reply.json_grammar import JsonRules  # noqa: E402

Converter = Callable[[Any], str]
"""A schema to a whole GBNF grammar (`root` the value); raises where it cannot."""


def new(schema: Any) -> str:
    rules = JsonRules()
    name = rules.rule(schema, "value")
    return "\n".join([f"root ::= {name}", *rules.lines()]) + "\n"


def old(schema: Any) -> str:
    from llama_cpp.llama_grammar import SchemaConverter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)  # type: ignore[no-untyped-call]
    resolved = converter.resolve_refs(json.loads(json.dumps(schema)), "value")
    rule = converter.visit(resolved, "value")  # type: ignore[no-untyped-call]
    grammar: str = converter.format_grammar()  # type: ignore[no-untyped-call]
    return grammar if rule == "root" else f"root ::= {rule}\n{grammar}"


def schemas() -> list[tuple[str, Any, str]]:
    """(name, schema, one valid value as text) for each agent tool."""
    data = json.loads((ROOT / "tests" / "data" / "reply" / "agent_tools.json").read_text("utf-8"))
    found = []
    for client in ("claude_code", "codex", "opencode"):
        for tool in data[client]:
            schema = tool["input_schema"] if client == "claude_code" else tool["function"]["parameters"]
            name = tool["name"] if client == "claude_code" else tool["function"]["name"]
            found.append((f"{client}.{name}", schema, json.dumps(_instance(schema, schema))))
    return found


def _instance(schema: Any, root: Any) -> Any:
    """A valid value for the agent tools' shapes: required properties only, strings "x", the first enum value."""
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return _instance(target, root)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {key: _instance(schema["properties"][key], root) for key in schema.get("required", ())}
    if kind == "array":
        return [_instance(schema.get("items", {}), root)]
    if kind in ("integer", "number"):
        return int(schema.get("minimum", 0)) + (1 if "exclusiveMinimum" in schema else 0)
    if kind == "boolean":
        return True
    return "x" * int(schema.get("minLength", 1))


def _median(run: Callable[[], float], repeat: int) -> float:
    return statistics.median(run() for _ in range(repeat))


def llama_cpp_costs(judge: Judge, grammar: str, text: str, repeat: int) -> tuple[float, float]:
    """llama.cpp's grammar setup (ms) and cost a byte (us): the mask over the 256 byte tokens, then the byte."""
    import ctypes

    import llama_cpp
    from gbnf_judge import FIRST_BYTE

    def setup() -> float:
        start = time.perf_counter()
        sampler = llama_cpp.llama_sampler_init_grammar(judge.vocab, grammar.encode(), b"root")
        spent = time.perf_counter() - start
        llama_cpp.llama_sampler_free(sampler)
        return spent * 1000

    def per_byte() -> float:
        sampler = llama_cpp.llama_sampler_init_grammar(judge.vocab, grammar.encode(), b"root")
        data = (llama_cpp.llama_token_data * 256)()
        start = time.perf_counter()
        for byte in text.encode():
            for at in range(256):
                data[at] = llama_cpp.llama_token_data(FIRST_BYTE + at, 0.0, 0.0)
            array = llama_cpp.llama_token_data_array(data, 256, -1, False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
            llama_cpp.llama_sampler_accept(sampler, FIRST_BYTE + byte)
        spent = time.perf_counter() - start
        llama_cpp.llama_sampler_free(sampler)
        return spent / len(text.encode()) * 1e6

    return _median(setup, repeat), _median(per_byte, repeat)


def llguidance_costs(tokenizer: Any, vocabulary: Any, grammar: str, text: str, repeat: int) -> tuple[float, float]:
    """llguidance's compile (ms) and cost a token (us): the mask, then the token."""
    import llguidance

    from chatcaps.serve.local import lark_grammar

    lark = llguidance.LLMatcher.grammar_from_lark(lark_grammar(grammar, tokenizer))
    ids = tokenizer.encode(text, add_special_tokens=False)

    def compile_once() -> float:
        start = time.perf_counter()
        matcher = llguidance.LLMatcher(vocabulary, lark)
        matcher.compute_bitmask()
        return (time.perf_counter() - start) * 1000

    def per_token() -> float:
        matcher = llguidance.LLMatcher(vocabulary, lark)
        start = time.perf_counter()
        for token in ids:
            matcher.compute_bitmask()
            matcher.consume_token(token)
        return (time.perf_counter() - start) / len(ids) * 1e6

    return _median(compile_once, repeat), _median(per_token, repeat)


def coverage(judge: Judge, convert: Converter) -> tuple[int, int, int]:
    """Of the keyword cases: schemas converted, texts judged as the case says, texts in all."""
    data = json.loads((ROOT / "tests" / "data" / "reply" / "json_grammar_cases.json").read_text("utf-8"))
    converted = right = total = 0
    for case in data["cases"]:
        samples = [(text, True) for text in case["accepts"]] + [(text, False) for text in case["rejects"]]
        total += len(samples)
        try:
            grammar = convert(case["schema"])
        except Exception:  # the old converter raises anything: counted as converting nothing
            continue
        if len(grammar) > 200_000 or re.search(r"\{\d*,?\d{5,}\}", grammar):  # llama.cpp crashes reading it
            continue
        if not judge.compiles(grammar):
            continue
        converted += 1
        right += sum(judge.accepts(grammar, text) == accepts for text, accepts in samples)
    return converted, right, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import llguidance.hf
    from tiny_model import tiny_model_dir
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
    vocabulary = llguidance.hf.from_tokenizer(tokenizer)  # type: ignore[arg-type]  # any HF tokenizer
    judge = Judge(Path(tempfile.mkdtemp()))
    print(
        "| converter | agent tools converted | convert (ms, median a tool) | llama.cpp setup (ms) "
        "| llama.cpp a byte (us) | llguidance compile (ms) | llguidance a token (us) "
        "| keyword cases: schemas converted, texts judged right |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for label, convert in (("llama-cpp-python SchemaConverter (before)", old), ("chatcaps json_grammar (now)", new)):
        rows: list[tuple[float, float, float, float, float]] = []
        failed = []
        for name, schema, text in schemas():
            try:
                start = time.perf_counter()
                grammar = convert(schema)
                spent = (time.perf_counter() - start) * 1000
            except Exception:  # the old converter's errors are of any kind (SchemaError the new one's)
                failed.append(name)
                continue
            if not judge.compiles(grammar):
                failed.append(f"{name} (llama.cpp cannot read the grammar)")
                continue
            setup, byte = llama_cpp_costs(judge, grammar, text, args.repeat)
            compiled, token = llguidance_costs(tokenizer, vocabulary, grammar, text, args.repeat)
            rows.append((spent, setup, byte, compiled, token))
        converted, right, total = coverage(judge, convert)
        medians = [statistics.median(row[at] for row in rows) for at in range(5)]
        print(
            f"| {label} | {len(rows)} of {len(rows) + len(failed)} | {medians[0]:.2f} | {medians[1]:.2f} | "
            f"{medians[2]:.1f} | {medians[3]:.2f} | {medians[4]:.1f} | {converted} of "
            f"{len(json.loads((ROOT / 'tests/data/reply/json_grammar_cases.json').read_text())['cases'])}, "
            f"{right} of {total} |"
        )
        if failed:
            print(f"  raised on: {', '.join(failed)}")
    judge.close()


if __name__ == "__main__":
    main()
