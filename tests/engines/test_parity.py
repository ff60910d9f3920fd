"""The acceptance test of the engines: zoo x contexts, against transformers' own rendering.

jinja2 must match transformers byte for byte, and raise (a chatcaps error keeping the template's message) exactly
where transformers raises. minijinja must stay at or above the parity floor committed in
tests/data/minijinja_parity.json; its differences are listed in docs/engines.md.
"""

from __future__ import annotations

import json

import pytest
from paths import DATA
from transformers_reference import reference_render

from chatcaps.contexts import Context
from chatcaps.outcome import Outcome, engine_render
from chatcaps.zoo import ZooTemplate

FLOOR_FILE = DATA / "minijinja_parity.json"
_REFERENCES: dict[tuple[str, str], Outcome] = {}


def reference(template: ZooTemplate, context: Context) -> Outcome:
    """transformers' outcome for one pair, rendered once per session (both engines are compared with it)."""
    key = (template.file, context.name)
    if key not in _REFERENCES:
        _REFERENCES[key] = reference_render(
            template.read(), context, bos_token=template.bos_token, eos_token=template.eos_token
        )
    return _REFERENCES[key]


def agree(reference: Outcome, got: Outcome, *, same_message: bool) -> bool:
    """Same output, or both raised (and, with `same_message`, transformers' message is kept in chatcaps' error)."""
    if reference.raised:
        return got.raised and (not same_message or str(reference.error) in str(got.error))
    return got.output == reference.output


def test_jinja2_matches_transformers(zoo_template: ZooTemplate, contexts: tuple[Context, ...]) -> None:
    source = zoo_template.read()
    tokens = {"bos_token": zoo_template.bos_token, "eos_token": zoo_template.eos_token}
    mismatches = []
    for context in contexts:
        expected = reference(zoo_template, context)
        got = engine_render(source, context, engine="jinja2", **tokens)
        if not agree(expected, got, same_message=True):
            mismatches.append(f"{context.name}: transformers={expected} chatcaps={got}")
    assert mismatches == []


def test_minijinja_parity_rate_holds_its_floor(zoo: tuple[ZooTemplate, ...], contexts: tuple[Context, ...]) -> None:
    floor = json.loads(FLOOR_FILE.read_text())
    matched = total = 0
    for template in zoo:
        source = template.read()
        tokens = {"bos_token": template.bos_token, "eos_token": template.eos_token}
        for context in contexts:
            got = engine_render(source, context, engine="minijinja", **tokens)
            matched += agree(reference(template, context), got, same_message=False)
            total += 1
    rate = matched / total
    print(f"minijinja parity: {matched}/{total} = {rate:.4f} (floor {floor['rate']})")
    assert rate >= floor["rate"]


@pytest.mark.parametrize("engine", ["jinja2", "minijinja"])
def test_template_error_keeps_the_templates_message(engine: str, contexts: tuple[Context, ...]) -> None:
    source = "{{ raise_exception('Zq7 roles must alternate user/assistant') }}"
    got = engine_render(source, contexts[0], engine=engine)  # type: ignore[arg-type]
    assert (got.error_type, got.error) == ("TemplateRenderError", "Zq7 roles must alternate user/assistant")
