"""FastCodeGenerator: exactly jinja2's generated code, and the parsed tree left as parsed (the candidate reader walks
it after compiling)."""

from __future__ import annotations

import pytest
from jinja2.compiler import CodeGenerator, optimizeconst

from chatcaps.engines.base import DEFAULT_LIMITS
from chatcaps.engines.jinja2_engine import Jinja2Renderer, _CodeGenerator, _LimitedSandbox
from chatcaps.probes.candidates import find_candidates
from chatcaps.zoo import ZooTemplate


class _Jinja2CodeGenerator(CodeGenerator):
    """jinja2's own generator with the engine's one change (`~` through `concat_values`), folding as jinja2 does."""

    visit_Concat = optimizeconst(_CodeGenerator.visit_Concat.__wrapped__)  # type: ignore[attr-defined]


def _code(source: str, generator: type[CodeGenerator]) -> str:
    environment = _LimitedSandbox(DEFAULT_LIMITS)
    environment.code_generator_class = generator  # type: ignore[assignment]
    return environment._generate(environment.parse(source), None, None)


FOLDING = [
    "{{ 1 + 2 * 3 }}{{ -1 }}{{ 'a' ~ 'b' ~ x }}{{ ('a' ~ 'b') | upper }}",
    "{{ [1, 2, 3] | length + (4 if true else y) }}{{ x if false else 'k' | upper | lower }}",
    "{% for m in messages if 1 < 2 %}{{ loop.index if true else m }}{{ ('x' * 3) ~ m.role }}{% endfor %}",
    "{% set ns = namespace(a=1 + 1) %}{% macro f(a=2 ** 3, b='q' | upper) %}{{ a ~ b ~ (1, 2) }}{% endmacro %}"
    "{{ f() }}{% set ns.a = ns.a + (3 - 1) %}{{ ns.a }}",
    "{% autoescape true %}{{ '<b>' ~ x }}{{ '<i>' | e }}{% endautoescape %}{{ '<u>' ~ 'v' }}",
    "{% autoescape x %}{{ 'a' ~ 'b' }}{% endautoescape %}{{ {'a': 1 + 1}['a'] }}{{ x[1 + 1:3] }}",
    "{{ (((((1 + 1) + 1) + 1) + 1) + 1) }}{{ 'a'.upper() }}{{ x.y.z | default('d' ~ 'e') | trim }}",
    "{% if not (1 == 1) and x is defined %}{{ x }}{% elif 'a' in 'abc' %}in{% else %}{{ 10 // 3 }}{% endif %}",
    "{% filter upper %}{{ 'a' ~ 1 }}{% endfilter %}{% call f('a' ~ 'b') %}{{ 2 * 2 }}{% endcall %}",
    "{% for m in range(1 + 2) recursive %}{{ loop([m] * (1 + 1)) }}{% endfor %}{% set y = 'a' ~ 'b' %}{{ y }}",
    "{% with a = 1 + 1 %}{{ a ~ ('b' | upper) }}{% endwith %}{{ x | selectattr('a', 'equalto', 'b' ~ 'c') | list }}",
    "{% if x is sameas(1 + 1) %}{{ x[('a' ~ 'b')] }}{{ f('a' ~ 'b', k=1 + 1, *[1 + 1]) }}{% endif %}",
]


@pytest.mark.parametrize("source", FOLDING)
def test_same_code_as_jinja2_where_constants_fold(source: str) -> None:
    assert _code(source, _CodeGenerator) == _code(source, _Jinja2CodeGenerator)


def test_same_code_as_jinja2_on_the_zoo(zoo_template: ZooTemplate) -> None:
    source = zoo_template.read()
    assert _code(source, _CodeGenerator) == _code(source, _Jinja2CodeGenerator)


@pytest.mark.parametrize("source", FOLDING)
def test_compiling_leaves_the_tree_as_parsed(source: str) -> None:
    renderer = Jinja2Renderer(source)
    tree = renderer.source_tree()
    assert tree is not None
    assert tree == _LimitedSandbox(DEFAULT_LIMITS).parse(source)
    assert renderer.source_tree() is None  # handed over once


def test_candidates_from_the_engines_tree(zoo_template: ZooTemplate) -> None:
    source = zoo_template.read()
    assert find_candidates(source, tree=Jinja2Renderer(source).source_tree()) == find_candidates(source)
