"""Proof by sampling: texts drawn at random from the grammars `chatcaps.reply.constraint` writes (the grammar's own
matcher choosing each token, `grammar_sampler.walk`: llguidance's on the tiny tokenizer, llama.cpp's over byte
tokens) read back through `parse_reply` into what the grammar promised. For every zoo template whose call format
has rules, under `required`, a named tool, `auto` (the lazy grammar, from its trigger) and `none`, with the tools
of one of four real tool sets (the zoo tests' own, Claude Code's, Codex's, OpenCode's: tests/data/reply/
agent_tools.json) in turn:

- every text that ends has calls only of declared tools (the named one where one is named), one where parallel
  calls are off, at least one where a call is required or the lazy grammar was triggered, none under `none`;
- each call's arguments are JSON that `jsonschema` finds valid for the tool's schema, but for keywords the grammar
  says it leaves looser (`Constraint.loosened`).

About 150 texts here (within a minute on two idle cores: a quarter of the templates);
scripts/bench_constrained_sampling.py draws from every template, thousands.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import pytest
from gbnf_judge import Judge
from grammar_sampler import Engine, LlamaCpp, Llguidance, walk
from paths import ROOT
from test_reply_calls_zoo import CHAT, TOOLS

from chatcaps import ChatTemplate, parse_reply
from chatcaps.errors import ChatcapsError
from chatcaps.reply.constraint import Constraint, ConstraintError, constraint
from chatcaps.zoo import ZooTemplate

AGENTS: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "reply" / "agent_tools.json").read_text("utf-8"))
TOOL_SETS: tuple[list[dict[str, Any]], ...] = (
    TOOLS,
    [
        {"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
        for t in AGENTS["claude_code"]
    ],
    AGENTS["codex"],
    AGENTS["opencode"],
)
CHOICES = ("required", "named", "auto", "none")


@dataclass
class Tally:
    """What a run drew: texts that ended and did not, per choice, and what was wrong with the ones that ended."""

    ended: Counter[str] = field(default_factory=Counter)
    unended: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)


def check(
    text: str,
    template: ChatTemplate,
    prompt: str,
    tools: Sequence[Any],
    choice: Any,
    found: Constraint,
    *,
    parallel: bool,
) -> list[str]:
    """What is wrong with `text`, read back as the reply to `prompt`, for the grammar `found` promised."""
    reply = parse_reply(text, template.caps, prefix=prompt, tools=tools)
    schemas = {tool["function"]["name"]: tool["function"].get("parameters") or {} for tool in tools}
    calls = reply.tool_calls
    kind = found.kind
    problems = []
    if kind == "none" and calls:
        problems.append("a call under none")
    if not calls and (kind in ("required", "named") or (kind == "lazy" and found.triggers)):
        problems.append(f"no call: {list(reply.warnings)[:1]}")
    if not parallel and len(calls) > 1:
        problems.append(f"{len(calls)} calls without parallel calls")
    for call in calls:
        name = call["function"]["name"]
        if isinstance(choice, dict) and name != choice["function"]["name"]:
            problems.append(f"{name} called, {choice['function']['name']} named")
        if name not in schemas:
            problems.append(f"{name} is no tool")
            continue
        try:
            arguments = json.loads(call["function"]["arguments"])
        except ValueError:
            problems.append(f"{name}: arguments not JSON")
            continue
        for error in jsonschema.Draft202012Validator(schemas[name]).iter_errors(arguments):
            if not any(_covers(note, name, str(error.validator)) for note in found.loosened):
                problems.append(f"{name}: {error.validator}: {error.message[:120]}")
    return problems


def _covers(note: str, tool: str, keyword: str) -> bool:
    """Whether a `loosened` note says the grammar does not enforce `keyword` for `tool`."""
    return note.startswith(f"{tool}: ") and (f": {keyword} at " in note or "unconstrained" in note)


def sample_zoo(
    zoo: Sequence[ZooTemplate],
    engines: dict[str, tuple[Engine, int]],
    *,
    seed: int = 0,
    every: int = 1,
    judge: Judge | None = None,
    judged: int = 1,
    tries: int = 12,
) -> Tally:
    """Texts drawn from every `every`th zoo template with a call format, each choice, each engine (with its
    number of walks per grammar), checked by `check`, and every `judged`th also accepted by llama.cpp's engine
    (`judge`; a text with a NUL byte is not judged: llama.cpp reads a grammar's input as a C string)."""
    rng = random.Random(seed)
    tally = Tally()
    count = 0
    with_format = []
    for entry in zoo:
        template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
        if template.caps.tools.call_format is not None:
            with_format.append((entry.file, template))
    for at, (file, template) in enumerate(with_format[::every]):
        tools = TOOL_SETS[at % len(TOOL_SETS)]
        names = [tool["function"]["name"] for tool in tools]
        parallel = at % 2 == 0
        try:
            prompt = template.render(CHAT, tools=tools).prompt
        except ChatcapsError:
            continue
        for choice in CHOICES:
            asked: Any = (
                {"type": "function", "function": {"name": names[at % len(names)]}} if choice == "named" else choice
            )
            try:
                found = constraint(template.caps, tools, asked, prompt=prompt, parallel=parallel)
            except ConstraintError:
                continue
            if found is None:
                continue
            for name, (engine, walks) in engines.items():
                for _ in range(walks):
                    text = walk(engine, found.grammar, rng, tries=tries)
                    counted = tally.ended if text is not None else tally.unended
                    counted[f"{name} {choice}"] += 1
                    if text is None:
                        continue
                    problems = check(text, template, prompt, tools, asked, found, parallel=parallel)
                    count += 1
                    if judge and count % judged == 0 and "\x00" not in text and not judge.accepts(found.grammar, text):
                        problems.append("llama.cpp's engine rejects it")
                    for problem in problems:
                        tally.wrong.append(f"{file} {choice} ({name}): {problem}: {text[:200]!r}")
    return tally


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    found = Judge(tmp_path_factory.mktemp("judge"))
    yield found
    found.close()


def test_sampled_calls_are_valid_calls(zoo: tuple[ZooTemplate, ...], tokenizer: Any, judge: Judge) -> None:
    """Every fourth template, one llguidance walk for each choice (a grammar read by llguidance costs about 90 ms
    here, most of it `gbnf_to_lark`), a quarter of them also judged by llama.cpp's engine; llama.cpp's own walks on
    every twenty-fifth template (byte tokens make longer walks, and each literal tried copies the grammar's state).
    scripts/bench_constrained_sampling.py runs every template, with more walks."""
    pytest.importorskip("llguidance")
    tally = sample_zoo(zoo, {"llguidance": (Llguidance(tokenizer), 1)}, every=4, judge=judge, judged=4)
    tally_cpp = sample_zoo(zoo, {"llama.cpp": (LlamaCpp(judge), 1)}, seed=1, every=25, tries=4)
    ended = tally.ended + tally_cpp.ended
    unended = tally.unended + tally_cpp.unended
    print(f"\nended {sum(ended.values())}, unended {sum(unended.values())}: {dict(ended)}")
    assert tally.wrong + tally_cpp.wrong == []
    # most walks end (a walk given up proves nothing, but most must end for the test to prove much)
    enough = sum(ended.values()) >= sum(unended.values()) and all(ended[f"llguidance {c}"] >= 10 for c in CHOICES)
    assert enough, (dict(ended), dict(unended))
