"""detect_caps on one small template per mechanism (tests/data/probe_templates.json), on both engines."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paths import DATA

from chatcaps import TemplateSyntaxError, detect_caps
from chatcaps.engines import ENGINE_NAMES, EngineName, compile_template
from chatcaps.probes.prober import Prober
from chatcaps.probes.reasoning import message_header
from chatcaps.vocab import suffix_after_common

CASES: dict[str, Any] = json.loads((DATA / "probe_templates.json").read_text("utf-8"))
CASES.pop("_doc")


def _at(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_mechanism(case: str, engine: EngineName) -> None:
    spec = CASES[case]
    caps = detect_caps(spec["template"], bos_token="<s>", engine=engine).to_dict()
    # minijinja's own error texts differ, and it iterates None without raising (docs/engines.md)
    expected = {
        path: value
        for path, value in spec["expect"].items()
        if engine == "jinja2" or not path.startswith("probe_errors")
    } | (spec.get("expect_minijinja", {}) if engine == "minijinja" else {})
    assert {path: _at(caps, path) for path in expected} == expected


def test_syntax_error_raises_with_position() -> None:
    with pytest.raises(TemplateSyntaxError) as raised:
        detect_caps("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    assert raised.value.line == 2


@given(st.text("ab< \n", max_size=12), st.text("ab< \n", max_size=12))
def test_the_text_after_the_common_prefix(one: str, other: str) -> None:
    pairs = enumerate(zip(one, other, strict=False))
    shared = next((at for at, (left, right) in pairs if left != right), min(len(one), len(other)))
    assert suffix_after_common(one, other) == other[shared:]


def test_a_preview_records_nothing_and_leaves_the_render_fresh() -> None:
    """`Prober.preview` renders without claiming: the first probe that asks for the same input records its error and
    its tool-list retry as if it had rendered it."""
    source = "{% if boom %}{{ raise_exception('boom') }}{% endif %}{% for t in tools %}{{ t }}{% endfor %}"
    prober = Prober(compile_template(source), bos_token="", eos_token="")
    messages = [{"role": "user", "content": "hi"}]
    for kwargs in ({"boom": True}, {}):
        previewed = prober.preview("controls", messages, kwargs=kwargs)
        assert previewed.fresh and previewed.error is not None
        assert prober.errors == () and not prober.needs_tool_list
    assert prober.render("controls.boom", messages, kwargs={"boom": True}) is None
    assert prober.render("controls", messages) is not None
    assert [error.probe for error in prober.errors] == ["controls.boom", "controls"]
    assert prober.needs_tool_list
    assert not prober.attempt("controls", messages).fresh


@pytest.mark.parametrize(
    ("call", "header"),
    [
        ("<|eom|><|start|>assistant to=get_time<|message|>", "<|start|>assistant to=user<|message|>"),
        ("<|eom|>[TOOL_CALLS]get_time", None),  # the call is no message of its own: no channel header
        ("<|start|>assistant to=get_time<|message|>", None),  # the call does not write the end marker
    ],
)
def test_a_message_header_is_what_the_answer_writes_from_the_prompt_on(call: str, header: str | None) -> None:
    """muse-glimmer's answer and call share only the end marker after the reasoning, then each opens a message as
    the generation prompt does: the answer's header, recipient included, is a channel's content header."""
    answer = "<|start|>assistant to=self<|message|>Zq7Reason1<|eom|><|start|>assistant to=user<|message|>Zq7Answer1"
    assert message_header(answer, "<|eom|>", "<|start|>assistant", call) == header
