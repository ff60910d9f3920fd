"""The grammar `chatcaps.reply.constraint` derives, judged by llama.cpp's own grammar engine (`gbnf_judge.Judge`) over
the zoo: every template with a call format accepts its own render of sentinel calls (every JSON type, two calls where
it writes more than one; under one of its renders: each reasoning intent, content None or "", `renders`) under
`tool_choice: "required"`, and rejects a call to an undeclared tool, arguments that
break the schema, two calls with `parallel_tool_calls: false`, and prose. The lazy grammar (`"auto"`) accepts the
calls from their opener on; `"none"` rejects them and accepts prose.

The templates whose render the grammar does not accept yet, or that `constraint` refuses, are in
tests/data/reply/constraint_zoo_failures.json with the reason; the set is pinned both ways.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from calls_renders import opening, renders
from gbnf_judge import Judge
from paths import ROOT
from test_reply_calls_zoo import TOOLS

from chatcaps import ChatTemplate
from chatcaps.reply.constraint import Constraint, ConstraintError, constraint
from chatcaps.serve.local import lark_grammar
from chatcaps.zoo import ZooTemplate

FAILURES: dict[str, str] = json.loads(
    (ROOT / "tests" / "data" / "reply" / "constraint_zoo_failures.json").read_text("utf-8")
)
LLGUIDANCE_FAILURES: dict[str, str] = json.loads(
    (ROOT / "tests" / "data" / "reply" / "constraint_llguidance_failures.json").read_text("utf-8")
)
PROSE = "I will look up the weather in Paris for you."


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    found = Judge(tmp_path_factory.mktemp("judge"))
    yield found
    found.close()


@pytest.fixture(scope="module")
def accepted(zoo: tuple[ZooTemplate, ...], judge: Judge) -> dict[str, tuple[ChatTemplate, str, str, str]]:
    """Every zoo template with a call format: its file, and for those the grammar accepts (under one of its
    renders), the template, the prompt, the model's text and the grammar; the others are reported by
    `test_own_calls_accepted`."""
    found: dict[str, tuple[ChatTemplate, str, str, str]] = {}
    for entry in zoo:
        template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
        if template.caps.tools.call_format is None:
            continue
        for prompt, text in renders(template, entry.eos_token):
            try:
                grammar = _required(template, prompt).grammar
            except ConstraintError:
                break
            if judge.accepts(grammar, text):
                found[entry.file] = (template, prompt, text, grammar)
                break
    return found


def _required(template: ChatTemplate, prompt: str, tools: list[Any] = TOOLS, **options: Any) -> Constraint:
    found = constraint(template.caps, tools, options.pop("choice", "required"), prompt=prompt, **options)
    assert found is not None
    return found


def test_own_calls_accepted(zoo: tuple[ZooTemplate, ...], accepted: dict[str, Any]) -> None:
    with_format = [entry.file for entry in zoo if entry.file in accepted or entry.file in FAILURES]
    print(f"\n{len(accepted)}/{len(with_format)} templates with a call format accept their own calls")
    failing = {
        entry.file
        for entry in zoo
        if entry.file not in accepted
        and ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token).caps.tools.call_format
    }
    assert sorted(failing) == sorted(FAILURES)


def test_undeclared_tool_rejected(accepted: dict[str, Any], judge: Judge) -> None:
    """Without `get_weather` among the tools, the same text (which calls it) is rejected; so is it where the request
    names `get_time`."""
    others = [tool for tool in TOOLS if tool["function"]["name"] != "get_weather"]
    named = {"type": "function", "function": {"name": "get_time"}}
    wrong = [
        file
        for file, (template, prompt, text, _) in accepted.items()
        if judge.accepts(_required(template, prompt, others).grammar, text)
        or judge.accepts(_required(template, prompt, choice=named).grammar, text)
    ]
    assert wrong == []


def test_schema_break_rejected(accepted: dict[str, Any], judge: Judge) -> None:
    """With `count` declared a boolean, the text's `3` breaks the schema."""
    tools = copy.deepcopy(TOOLS)
    for tool in tools:
        tool["function"]["parameters"]["properties"]["count"] = {"type": "boolean"}
    wrong = [
        file
        for file, (template, prompt, text, _) in accepted.items()
        if judge.accepts(_required(template, prompt, tools).grammar, text)
    ]
    assert wrong == []


def test_prose_rejected_where_a_call_is_required(accepted: dict[str, Any], judge: Judge) -> None:
    assert [file for file, (*_, grammar) in accepted.items() if judge.accepts(grammar, PROSE)] == []


def test_one_call_without_parallel_calls(accepted: dict[str, Any], judge: Judge) -> None:
    """Two calls are rejected with `parallel_tool_calls: false`; the template's render of one call is accepted."""
    wrong = []
    for file, (template, prompt, text, _) in accepted.items():
        if template.caps.tools.call_format.separator is None:
            continue
        if judge.accepts(_required(template, prompt, parallel=False).grammar, text):
            wrong.append(file)
    assert wrong == []


def test_lazy_grammar_from_the_opener(accepted: dict[str, Any], judge: Judge) -> None:
    """`"auto"`: the grammar starts at its trigger word, which the calls' text holds; from there it accepts them.
    Where the prompt wrote the opener (functionary's `>>>`), it holds from the start: it accepts the calls and an
    answer."""
    wrong = []
    for file, (template, prompt, text, _) in accepted.items():
        lazy = _required(template, prompt, choice="auto")
        assert lazy.kind == "lazy"
        if not lazy.triggers:
            if not (judge.accepts(lazy.grammar, text) and judge.accepts(lazy.grammar, answer(template, prompt, PROSE))):
                wrong.append(file)
            continue
        (word,) = lazy.triggers
        if word not in text or not judge.accepts(lazy.grammar, text[text.index(word) :].rstrip()):
            wrong.append(file)
    assert wrong == []


def answer(template: ChatTemplate, prompt: str, text: str) -> str:
    """`text` as an answer after `prompt`: after the reasoning's end marker where the prompt opened the block (or the
    block has no start marker: the generation prompt opens it in words), after the answer's header where the prompt
    wrote the calls' opening (functionary's `>>>all\n`)."""
    start, end = template.caps.reasoning.start_marker, template.caps.reasoning.end_marker
    tail = prompt.rstrip()
    reasoned = end and template.caps.reasoning.format != "none" and not tail.endswith(end.strip())
    opened = reasoned and (not start or tail.endswith(start.strip()))
    calls = template.caps.tools.call_format
    headers = template.caps.reasoning.content_headers
    if (
        calls is not None and tail.endswith(opening(calls)) and headers
    ):  # the prompt wrote the calls' opening: an answer names itself
        text = headers[0] + text
    return f"Zq7 thinks.{end}{text}" if opened else text


def test_none_rejects_calls_and_accepts_prose(accepted: dict[str, Any], judge: Judge) -> None:
    wrong = []
    for file, (template, prompt, text, _) in accepted.items():
        banned = _required(template, prompt, choice="none")
        if judge.accepts(banned.grammar, text):
            wrong.append(f"{file}: accepts calls")
        if not judge.accepts(banned.grammar, answer(template, prompt, PROSE)):
            wrong.append(f"{file}: rejects prose")
    assert wrong == []


def test_llguidance_reads_the_same_grammars(accepted: dict[str, Any], tokenizer: Any) -> None:
    """The transformers path's matcher (llguidance, `chatcaps serve --model`) takes the same GBNF
    (`serve.local.lark_grammar`: a marker also as the tokenizer's added token) and accepts the same renders, token by
    token on the tiny model's tokenizer (`<think>` one token), and rejects prose; the templates where it does not yet
    are pinned in tests/data/reply/constraint_llguidance_failures.json."""
    pytest.importorskip("llguidance")
    import llguidance.hf

    vocabulary = llguidance.hf.from_tokenizer(tokenizer)
    wrong = []
    for file, (*_, text, grammar) in accepted.items():
        lark = llguidance.LLMatcher.grammar_from_lark(lark_grammar(grammar, tokenizer))
        for sample, accepts in ((text, True), (PROSE, False)):
            matcher = llguidance.LLMatcher(vocabulary, lark)
            ids = tokenizer.encode(sample, add_special_tokens=False)
            if (matcher.consume_tokens(ids) and matcher.is_accepting()) != accepts:
                wrong.append(f"{file}: {'rejects its calls' if accepts else 'accepts prose'}")
    assert wrong == [f"{file}: rejects its calls" for file in LLGUIDANCE_FAILURES]
