"""llama.cpp's parse cases (tests/data/reply/llamacpp_cases.json) as a ratchet: the cases listed as passing in
tests/data/reply/llamacpp_labels.json read right, batch and streamed, and no other case does, so a regression fails
here and a fix adds its ids (`python scripts/llamacpp_replies.py --ratchet`). The runner and its comparison are
scripts/llamacpp_replies.py's; the corpus is regenerated from the sdist by scripts/llamacpp_cases.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from types import ModuleType
from typing import Any

import pytest
from paths import ROOT

from chatcaps.zoo import ZooTemplate


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


RUNNER = _script("llamacpp_replies")
EXTRACTOR = _script("llamacpp_cases")
CASES: list[dict[str, Any]] = RUNNER.load_cases()
LABELS: dict[str, Any] = RUNNER.load_labels()


def test_labels_name_corpus_cases() -> None:
    ids = {case["id"] for case in CASES}
    passing, failures = set(LABELS["passing"]), set(LABELS["failures"])
    assert sorted(passing - ids) == []
    assert sorted(failures - ids) == []
    assert sorted(passing & failures) == []
    assert {entry["label"] for entry in LABELS["failures"].values()} <= set(RUNNER.KINDS)


def test_corpus_counts() -> None:
    assert len(CASES) == 463
    assert Counter(case["category"] for case in CASES) == {
        "tool_calls": 276,
        "continuation": 72,
        "reasoning": 63,
        "content": 52,
    }


def test_corpus_is_what_the_sdist_gives() -> None:
    if not EXTRACTOR.SDIST.is_file():
        pytest.skip(f"no {EXTRACTOR.SDIST}: scripts/setup.sh downloads it")
    cases, skipped = EXTRACTOR.extract(EXTRACTOR.read_source(EXTRACTOR.SDIST))
    assert dict(skipped) == {}
    assert cases == json.loads(RUNNER.CASES.read_text("utf-8"))["cases"]


def test_exactly_the_listed_cases_pass(zoo: tuple[ZooTemplate, ...]) -> None:
    outcomes = RUNNER.run_all(CASES)
    regressed = [
        f"{o.case['id']}: {o.batch or o.stream}" for o in outcomes if not o.right and o.case["id"] in LABELS["passing"]
    ]
    assert regressed == []
    fixed = sorted(o.case["id"] for o in outcomes if o.right and o.case["id"] not in LABELS["passing"])
    assert fixed == [], "newly right: run python scripts/llamacpp_replies.py --ratchet and drop their labels"


def test_difference_says_the_first_field_that_differs() -> None:
    expected = {"content": "Hi", "reasoning_content": "", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}
    got = {
        "content": " Hi\n",
        "reasoning_content": None,
        "tool_calls": [{"id": "call_0", "name": "f", "arguments": '{"a": 2}'}],
    }
    assert RUNNER.difference(expected, got, False) == "call arguments: call 0 want {'a': 1}, got {'a': 2}"
    assert (
        RUNNER.difference(expected, got | {"tool_calls": [{"id": "x", "name": "f", "arguments": '{"a":1}'}]}, False)
        == ""
    )
    partial = {"content": "", "reasoning_content": "", "tool_calls": [{"name": "f", "arguments": None}]}
    assert (
        RUNNER.difference(
            partial,
            {"content": "", "reasoning_content": "", "tool_calls": [{"id": "", "name": "f", "arguments": '{"a'}]},
            True,
        )
        == ""
    )


def test_merged_joins_deltas_as_a_client_does() -> None:
    deltas = [
        {"reasoning_content": "I'm"},
        {"reasoning_content": " thinking"},
        {"content": "Hi"},
        {"tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
    ]
    assert RUNNER.merged(deltas) == {
        "content": "Hi",
        "reasoning_content": "I'm thinking",
        "tool_calls": [{"id": "call_0", "name": "f", "arguments": '{"a": 1}'}],
    }
