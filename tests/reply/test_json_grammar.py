"""`chatcaps.reply.json_grammar`, the JSON Schema converter every backend's grammar uses: for each schema in
tests/data/reply/json_grammar_cases.json, the texts its grammar must accept and reject, judged by llama.cpp's own
grammar engine (`gbnf_judge.Judge`) and by llguidance (the `--model` backend's matcher, reading the same GBNF through
`serve.local.lark_grammar`), the keywords it reports it leaves looser, and the schemas it cannot read at all, with
the keyword named. Every text it accepts for a schema it reports nothing about is valid by `jsonschema`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from gbnf_judge import Judge
from hypothesis import given, settings
from paths import ROOT
from strategies import json_schemas

from chatcaps.reply.json_grammar import JsonRules, SchemaError
from chatcaps.serve.local import lark_grammar

DATA: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "reply" / "json_grammar_cases.json").read_text("utf-8"))
CASES: list[dict[str, Any]] = DATA["cases"]


def grammar(schema: Any, strict: bool = False) -> tuple[str, list[str]]:
    """The whole grammar for one JSON value fitting `schema`, and what it leaves looser."""
    rules = JsonRules()
    name = rules.rule(schema, "value", strict=strict)
    return "\n".join([f"root ::= {name}", *rules.lines()]) + "\n", rules.loosened


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    found = Judge(tmp_path_factory.mktemp("judge"))
    yield found
    found.close()


def _name(case: dict[str, Any]) -> str:
    return json.dumps(case["schema"])[:60]


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_accepts_and_rejects(case: dict[str, Any], judge: Judge) -> None:
    text, loosened = grammar(case["schema"], case.get("strict", False))
    verdicts = {sample: judge.accepts(text, sample) for sample in case["accepts"] + case["rejects"]}
    assert (verdicts, loosened) == (
        {**dict.fromkeys(case["accepts"], True), **dict.fromkeys(case["rejects"], False)},
        case["loosened"],
    )


@pytest.mark.parametrize(
    "case", [case for case in CASES if not case["loosened"] and not case.get("openapi")], ids=_name
)
def test_accepted_texts_are_valid(case: dict[str, Any]) -> None:
    """The test's own texts: what the grammar must accept is valid JSON for the schema (where nothing is looser)."""
    for sample in case["accepts"]:
        jsonschema.validate(json.loads(sample), case["schema"])


def test_llguidance_agrees(tokenizer: Any) -> None:
    """llguidance reads every case's grammar and gives llama.cpp's verdicts, token by token on the tiny tokenizer."""
    pytest.importorskip("llguidance")
    import llguidance.hf

    vocabulary = llguidance.hf.from_tokenizer(tokenizer)
    wrong = []
    for case in CASES:
        text, _ = grammar(case["schema"], case.get("strict", False))
        lark = llguidance.LLMatcher.grammar_from_lark(lark_grammar(text, tokenizer))
        for sample, accepts in [(sample, True) for sample in case["accepts"]] + [(s, False) for s in case["rejects"]]:
            matcher = llguidance.LLMatcher(vocabulary, lark)
            ids = tokenizer.encode(sample, add_special_tokens=False)
            if (matcher.consume_tokens(ids) and matcher.is_accepting()) != accepts:
                wrong.append((_name(case), sample, accepts, matcher.get_error()))
    assert wrong == []


@pytest.mark.parametrize("case", DATA["errors"], ids=lambda case: json.dumps(case["schema"])[:60])
def test_unreadable_schema_names_the_keyword(case: dict[str, Any]) -> None:
    rules = JsonRules()
    rules.rule({"type": "string"}, "before")
    kept = dict(rules.rules)
    with pytest.raises(SchemaError) as raised:
        rules.rule(case["schema"], "value")
    assert (raised.value.keyword, rules.rules) == (case["keyword"], kept)


@settings(max_examples=300, deadline=None)
@given(schema=json_schemas())
def test_any_schema_is_a_grammar_or_a_schema_error(schema: Any, judge: Judge) -> None:
    """Whatever a client sends: a grammar llama.cpp reads, or `SchemaError` (never another exception)."""
    try:
        text, _ = grammar(schema)
    except SchemaError:
        return
    assert judge.compiles(text), text
