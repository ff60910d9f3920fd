"""The three agent clients' tool lists (tests/data/reply/agent_tools.json: Claude Code's in Anthropic's form, Codex's
and OpenCode's in OpenAI's) constrain without error on every call format of tests/data/reply/constraint_formats.json,
under `required` and `auto`: llama.cpp's engine reads each grammar, and what it leaves looser is named (the pinned
list below: a keyword a JSON grammar cannot say, or one a literal syntax other than JSON does not check). A schema
the converter cannot read is a 400 naming the tool under `required`, and that tool left free, named, under `auto`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from gbnf_judge import Judge
from paths import ROOT
from test_constraint import DATA, caps

from chatcaps.reply.constraint import ConstraintError, constraint

AGENTS: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "reply" / "agent_tools.json").read_text("utf-8"))
LOOSER_JSON = {
    "claude_code": ["WebFetch: format at #/properties/url"],
    "codex": [],
    "opencode": ["bash: maximum at #/properties/timeout", "bash: exclusiveMinimum at #/properties/timeout"],
}
"""What the JSON forms (hermes, mistral, functionary, harmony) leave looser: a URL's format, a number's bounds that
are not whole numbers at or above 0."""


def tools(client: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = AGENTS[client]
    if client != "claude_code":
        return listed
    return [
        {"type": "function", "function": {"name": tool["name"], "parameters": tool["input_schema"]}} for tool in listed
    ]


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    found = Judge(tmp_path_factory.mktemp("judge"))
    yield found
    found.close()


@pytest.mark.parametrize("client", ["claude_code", "codex", "opencode"])
def test_agent_tools_constrain(client: str, judge: Judge) -> None:
    unread = []
    for name in DATA["formats"]:
        for choice in ("required", "auto"):
            found = constraint(caps(name), tools(client), choice)
            assert found is not None
            if not judge.compiles(found.grammar):
                unread.append((name, choice))
            if name in ("hermes", "mistral", "functionary", "harmony"):
                assert list(found.loosened) == LOOSER_JSON[client]
            else:
                assert all(note.endswith("(not as JSON)") or note in LOOSER_JSON[client] for note in found.loosened)
    assert unread == []


def test_a_description_only_property_is_any_value(judge: Judge) -> None:
    """Claude Code's `Workflow.inputs` has only a description: any JSON value, no error, nothing looser."""
    found = constraint(caps("hermes"), [tools("claude_code")[-1]], "required")
    assert found is not None
    head = '<tool_call>\n{"name": "Workflow", "arguments": {"name": "w", "inputs": '
    verdicts = [
        judge.accepts(found.grammar, f"{head}{value}}}}}\n</tool_call>")
        for value in ('{"a": [1, null, "x"]}', "3", '"text"', '"a\nb"')
    ]
    assert (verdicts, found.loosened) == ([True, True, True, False], ())


UNREADABLE = {"type": "function", "function": {"name": "remote", "parameters": {"$ref": "https://example.com/s.json"}}}


def test_unreadable_schema_refused_under_required() -> None:
    with pytest.raises(ConstraintError, match="tool 'remote': its parameters' JSON schema cannot be constrained") as e:
        constraint(caps("hermes"), [*tools("codex"), UNREADABLE], "required")
    assert (e.value.field, "$ref at #" in str(e.value)) == ("tools", True)


def test_unreadable_schema_left_free_under_auto(judge: Judge) -> None:
    found = constraint(caps("hermes"), [*tools("codex"), UNREADABLE], "auto")
    assert found is not None
    assert found.loosened == ("remote: unconstrained ($ref at #: 'https://example.com/s.json' is outside the schema)",)
    assert judge.accepts(found.grammar, '<tool_call>\n{"name": "remote", "arguments": {"any": [1]}}\n</tool_call>')


def test_strict_tools_take_no_other_key(judge: Judge) -> None:
    """`strict: true` (OpenAI's; Anthropic's is passed on as the same): the arguments exactly the schema, even where
    it allows other keys; without it, another key is allowed where the schema says so."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": True}
    call = '<tool_call>\n{"name": "f", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>'
    verdicts = []
    for strict in (False, True):
        tool = {"type": "function", "function": {"name": "f", "parameters": schema, "strict": strict}}
        found = constraint(caps("hermes"), [tool], "required")
        assert found is not None
        verdicts.append(judge.accepts(found.grammar, call))
    assert verdicts == [True, False]
