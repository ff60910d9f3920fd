"""FastParser: exactly jinja2's tree (every node's type, fields, values, lineno and attribute order) or exactly its
error (type, message, line), for the zoo, every template the tests hold, generated expressions and malformed
sources."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator

import jinja2
import jinja2.parser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import nodes
from paths import TESTS

from chatcaps.engines.jinja2_engine import Jinja2Renderer
from chatcaps.engines.parser import FastParser
from chatcaps.probes.candidates import _ENV, find_candidates
from chatcaps.zoo import ZooTemplate

_MARKS = ("{{", "{%", "{#")

Dump = tuple[object, ...]


def dump(value: object, environment: object) -> object:
    """A node as its type and every attribute in `vars` order, recursively; `environment` is written as a marker."""
    if isinstance(value, nodes.Node):
        return (type(value), tuple((name, dump(item, environment)) for name, item in vars(value).items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(dump(item, environment) for item in value))
    if value is environment:
        return "<environment>"
    return (type(value), value)


def parsed(parser: type[jinja2.parser.Parser], source: str, environment: jinja2.Environment = _ENV) -> object:
    """The whole-template parse (`Parser.parse`, as `Environment.parse` runs it) dumped, or its error."""
    try:
        return dump(parser(environment, source).parse(), environment)
    except jinja2.TemplateSyntaxError as error:
        return ("error", type(error), error.message, error.lineno, error.name, error.filename)


def assert_same(source: str) -> None:
    assert parsed(FastParser, source) == parsed(jinja2.parser.Parser, source), source


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def _test_templates() -> dict[str, str]:
    """Every template the tests hold: `.jinja` files, strings in JSON data and string constants in test code that
    contain a tag opening (mechanism templates, security payloads, engine differences, ...), by source."""
    found: dict[str, str] = {}
    for path in sorted(TESTS.rglob("*")):
        if path.suffix == ".py":
            constants = (node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant))
            texts: Iterator[str] = (value for value in constants if isinstance(value, str))
        elif path.suffix == ".json":
            texts = _strings(json.loads(path.read_text()))
        elif path.name.endswith(".jinja"):
            texts = iter([path.read_text()])
        else:
            continue
        for text in texts:
            if any(mark in text for mark in _MARKS):
                found.setdefault(text, f"{path.relative_to(TESTS)}#{len(found)}")
    return found


TEST_TEMPLATES = _test_templates()


def test_the_tests_hold_hundreds_of_templates() -> None:
    assert len(TEST_TEMPLATES) > 300


def test_every_zoo_template_parses_to_jinja2s_tree(zoo_template: ZooTemplate) -> None:
    assert_same(zoo_template.read())


@pytest.mark.parametrize("source", list(TEST_TEMPLATES), ids=list(TEST_TEMPLATES.values()))
def test_every_template_in_the_tests_parses_to_jinja2s_tree_or_error(source: str) -> None:
    assert_same(source)


MALFORMED = [
    "{% if x %}",
    "{% if x %}\n{% for y in z %}\n{% endif %}",
    "{% for x in y %}{% else %}{% else %}{% endfor %}",
    "{% endfor %}",
    "\n\n{% endif %}",
    "{% elif x %}",
    "{% unknown %}",
    "{% %}",
    "{{ }}",
    "{{ x + }}",
    "{{ x +\n\n }}",
    "{{ ] }}",
    "{{ (x }}",
    "{{ [1, 2 }}",
    "{{ [1,, 2] }}",
    "{{ {1: } }}",
    "{{ {1 2} }}",
    "{{ 1 2 }}",
    "{{ not }}",
    "{{ a not b }}",
    "{{ a if }}",
    "{{ a if b else }}",
    "{{ a ~ }}",
    "{{ a ** }}",
    "{{ - }}",
    "{{ x. }}",
    "{{ x.'s' }}",
    "{{ x[1:2:3:4] }}",
    "{{ x | }}",
    "{{ x | 1 }}",
    "{{ x | f. }}",
    "{{ x is }}",
    "{{ x is not }}",
    "{{ x is y is z }}",
    "{{ f(*a, b) }}",
    "{{ f(**a, *b) }}",
    "{{ f(k=1, b) }}",
    "{{ f(**a, k=1) }}",
    "{{ f(a b) }}",
    "{{ f(,) }}",
    "{{ (,) }}",
    "{{ a,, b }}",
    "{% set 1 = x %}",
    "{% set ns.a.b = 1 %}",
    "{% set x %}",
    "{% set = 1 %}",
    "{% for %}{% endfor %}",
    "{% for x in %}{% endfor %}",
    "{% for x y %}{% endfor %}",
    "{% for 1 in x %}{% endfor %}",
    "{% for x in y if %}{% endfor %}",
    "{% if %}{% endif %}",
    "{% if x %}{% elif %}{% endif %}",
    "{% if x %}{% else %}{% elif y %}{% endif %}",
    "{% if x y %}{% endif %}",
    "{% macro f(a=1, b) %}{% endmacro %}",
    "{% macro f(a %}{% endmacro %}",
    "{% macro %}{% endmacro %}",
    "{% call f %}{% endcall %}",
    "{% filter %}{% endfilter %}",
    "{% block a-b %}{% endblock %}",
    "{% generation %}",
    "{% break x %}",
    "{{ x }}\n{% if y %}\n  {{ z\n  +\n }}\n{% endif %}",
    "{% if a %}\n{% if b %}\n{% endif %}",
    "{{ a\n  if b\n  else }}",
    "{{ a is b else c }}",
    "{{ [a for] }}",
]


@pytest.mark.parametrize("source", MALFORMED)
def test_malformed_sources_give_jinja2s_error(source: str) -> None:
    assert parsed(jinja2.parser.Parser, source)[0] == "error", "not malformed"  # type: ignore[index]
    assert_same(source)


EDGES = [
    "{{ a - -b + +c * -(d) ** -e }}",
    "{{ 'a' 'b' \"c\"\n'd' ~ 'e' }}",
    "{{ a\n+\nb\n-\nc }}{{ a\n~\nb\n~\nc }}{{ a\n==\nb\n<\nc }}{{ a\nand\nb\nor\nc\nand\nd }}",
    "{{ a\nif\nb\nelse\nc\nif\nd }}{{ x if y }}{{ x if y if z else w }}",
    "{{ not not a }}{{ not a == b }}{{ not a and not b or not c }}{{ a not in b not in c }}",
    "{{ a is not b }}{{ a is b(1, k=2) }}{{ a is b c.d }}{{ a is divisibleby 3 }}{{ a is b and c }}",
    "{{ a is defined or b is none }}{{ -a|abs }}{{ -a.b }}{{ -a[1] }}{{ -a() }}",
    "{{ x[1] }}{{ x[1:] }}{{ x[:2] }}{{ x[::3] }}{{ x[1:2:3] }}{{ x[a, b] }}{{ x[1:, :2] }}{{ x.0 }}{{ x.a.1.b }}",
    "{{ f() }}{{ f(a, b=1, *c, **d) }}{{ f(a,) }}{{ f(*a, **b) }}{{ f(k=1, *a) }}{{ f(a)(b)[c](d) }}",
    "{{ x|f }}{{ x|f(1) }}{{ x|f.g(k=1) }}{{ x|f|g(a)|h }}{{ (x|f)(1) }}{{ x|f() is g }}",
    "{{ [] }}{{ [1] }}{{ [1, 2,] }}{{ {} }}{{ {'a': 1, 'b': [2],} }}{{ () }}{{ (1,) }}{{ (1, 2) }}{{ ((1)) }}",
    "{{ 1, 2 }}{{ a, }}{% set a, b = 1, 2 %}{% set (a, b) = c %}{% for a, b in c %}{% endfor %}",
    "{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{% set ns.b %}x{% endset %}{% set c | upper %}y{% endset %}",
    "{{ true }}{{ True }}{{ false }}{{ none }}{{ None }}{{ 1_000 }}{{ 1.5e3 }}{{ 0x1f }}{{ x.true }}",
    "{% for x in y if x recursive %}{{ loop(x) }}{% else %}e{% endfor %}{% for x in y recursive %}{% endfor %}",
    "{% if a %}1{% elif b %}2{% elif c %}3{% else %}4{% endif %}{% if a: %}x{% endif %}",
    "{% macro f(a, b=1) %}{{ caller() }}{% endmacro %}{% call(x) f(1) %}{{ x }}{% endcall %}",
    "{% filter upper %}x{% endfilter %}{% with a = 1, b = 2 %}{{ a }}{% endwith %}{% print a, b %}",
    "{% for m in ms %}{% if m %}{% break %}{% else %}{% continue %}{% endif %}{% endfor %}",
    "{%- generation -%}{{ m }}{%- endgeneration -%}{% autoescape true %}{{ x }}{% endautoescape %}",
    "{% block b scoped %}x{% endblock b %}{% extends 'a' %}{% include 'a' ignore missing without context %}",
    "{% import 'a' as b with context %}{% from 'a' import b as c, d with context %}{% raw %}{{ x }}{% endraw %}",
    "{{ a ** b ** c }}{{ a // b % c * d / e }}{{ a + b - c ~ d + e }}{{ a < b <= c > d >= e != f == g }}",
    "{{ a\n**\nb\n**\nc }}{{ a\n*\nb\n/\nc\n//\nd\n%\ne }}{{ a\n+\nb\n-\nc\n+\nd }}{{ a\n~\nb\n~\nc }}",
    "{{ a\nand\nb\nand\nc }}{{ a\nor\nb\nor\nc }}{{ a\nif\nb\nif\nc }}{{ a\n==\nb\nin\nc\nnot in\nd }}",
    "{{ x.\n0 }}{{ x\n.\n1\n.a }}{{ x\n[\n1\n:\n2\n] }}{{ f\n(\na\n,\nk\n=\n1\n) }}",
    "{{ x\n|\nf\n|\ng }}{{ x\nis\nnot\nt }}",
    "{{ a,\nb,\nc }}{{ (a,\nb) }}{{ [a,\nb] }}{{ {a:\nb,\nc:\nd} }}{{ -\na }}{{ not\na }}{{ 'a'\n'b' }}",
    "{% if a %}\n{% elif\nb %}\n{% elif\n\nc %}{% endif %}{% for\nx\nin\ny\nif\nz %}{% endfor %}{% set\na\n=\n1 %}",
    "{{ x\n.\nd }}{{ x[\na,\nb\n] }}{{ a\n*\nb\n~\nc\n+\nd\n==\ne\nand\nf\nor\ng\nif\nh }}{{ a\n**\nb\n~\nc }}",
    "{{ -1 ** 2 }}{{ (a if b else c).d }}{{ x[] }}{{ x is y z }}{% set x.y = 1 %}{% set a, b %}{% endset %}",
]


@pytest.mark.parametrize("source", EDGES)
def test_edge_cases_give_jinja2s_tree_or_error(source: str) -> None:
    assert_same(source)


# Generated expressions: every operator, precedence level and postfix form, joined by spaces or newlines so that
# every node's line is tested too.
_SPACE = st.sampled_from([" ", "  ", "\n", " \n "])
_NAMES = st.sampled_from(["x", "y", "ns", "loop", "message", "true", "False", "none", "None", "is_a", "in_", "ifx"])
_CONSTANTS = st.sampled_from(["0", "1", "42", "1_0", "0x1f", "1.5", "2e3", "'a'", '"b"', "'a' 'b'", "'' \"c\" 'd'"])
_BINARY = st.sampled_from(
    ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
)
_FILTERS = st.sampled_from(["f", "upper", "f.g", "join(',')", "default(1, true)", "map(attribute='a')"])
_TESTS = st.sampled_from(["t", "defined", "none", "t.u", "t(1)", "sameas false", "eq 1", "divisibleby(3)"])


def _joined(*parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """The parts with a space or newline between each two."""
    pieces: list[st.SearchStrategy[str]] = []
    for part in parts:
        if pieces:
            pieces.append(_SPACE)
        pieces.append(part)
    return st.tuples(*pieces).map("".join)


def _word(text: str) -> st.SearchStrategy[str]:
    return st.just(text)


@st.composite
def _chains(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    """Two to four operands, each two joined by an operator (often the same one, for chains on one level) with a
    space or newline either side."""
    operator = draw(_BINARY)
    text = draw(inner)
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            operator = draw(_BINARY)
        text += draw(_SPACE) + operator + draw(_SPACE) + draw(inner)
    return text


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    items = st.lists(inner, max_size=3).map(", ".join)
    return st.one_of(
        _chains(inner),
        _joined(st.sampled_from(["-", "+", "not"]), inner),
        _joined(inner, _word("if"), inner),
        _joined(inner, _word("if"), inner, _word("else"), inner),
        _joined(inner, _word("|"), _FILTERS),
        _joined(inner, _word("is"), _TESTS),
        _joined(inner, _word("is not"), _TESTS),
        inner.map(lambda operand: f"({operand})"),
        st.tuples(inner, st.sampled_from([".a", ".0", "()", ".b.c", ".\n1", "\n.\nd"])).map("".join),
        st.tuples(inner, items).map(lambda pair: f"{pair[0]}({pair[1]})"),
        st.tuples(inner, inner, inner).map(lambda three: f"{three[0]}(a, k={three[1]}, *{three[2]}, **kw)"),
        st.tuples(inner, inner).map(lambda pair: f"{pair[0]}[{pair[1]}]"),
        st.tuples(inner, inner, inner).map(lambda three: f"{three[0]}[{three[1]}:{three[2]}]"),
        st.tuples(inner, inner).map(lambda pair: f"{pair[0]}[:{pair[1]}:]"),
        items.map(lambda listed: f"[{listed}]"),
        items.map(lambda listed: f"({listed},)"),
        st.tuples(inner, inner).map(lambda pair: f"{{{pair[0]}: {pair[1]}}}"),
    )


EXPRESSIONS = st.recursive(st.one_of(_NAMES, _CONSTANTS), _compound, max_leaves=16)
_WRAPPERS = [
    "{{{{ {0} }}}}",
    "{{{{ {0}, {0} }}}}",
    "{{{{ {0},\n}}}}",
    "{{{{ {0}\n,\n{0} }}}}",
    "{{% set a = {0} %}}",
    "{{% set a, ns.b = {0}, {0} %}}",
    "{{% if {0} %}}a{{% elif {0} %}}b{{% else %}}c{{% endif %}}",
    "{{% if\n{0} %}}a{{% elif\n{0} %}}b{{% endif %}}",
    "{{% for a, b in {0} if {0} %}}{{{{ a }}}}{{% else %}}-{{% endfor %}}",
    "{{% for a in {0} recursive %}}{{% endfor %}}",
    "{{% macro m(a, b={0}) %}}{{{{ {0} }}}}{{% endmacro %}}",
    "{{% print {0} %}}",
    "{{% with a = {0} %}}{{% endwith %}}",
    "{{% filter f({0}) %}}x{{% endfilter %}}",
]


@settings(max_examples=600, deadline=None)
@given(EXPRESSIONS, st.sampled_from(_WRAPPERS))
def test_generated_expressions_parse_to_jinja2s_tree_or_error(expression: str, wrapper: str) -> None:
    assert_same(wrapper.format(expression))


# Token soup: sequences jinja2 mostly refuses, for its errors and their lines.
_SYMBOLS = ["x", "1", "'s'", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}", "+", "-", "*", "**", "~", "==", "\n"]
_WORDS = ["=", "is", "not", "in", "and", "or", "if", "else", "for", "set", "endfor", "endif", "elif", "recursive", "ns"]
_PIECES = st.sampled_from(_SYMBOLS + _WORDS)
_OPENINGS = st.sampled_from(["{{ ", "{% ", "{% if ", "{% set ", "{% for "])
_SOUP_TAGS = st.tuples(_OPENINGS, st.lists(_PIECES, max_size=8).map(" ".join)).map(
    lambda tag: f"{tag[0]}{tag[1]} {'}}' if tag[0] == '{{ ' else '%}'}"
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_SOUP_TAGS, _PIECES), max_size=4))
def test_token_soup_gives_jinja2s_tree_or_error(parts: list[str]) -> None:
    assert_same("".join(parts))


def test_a_block_ends_at_any_end_token_as_token_test_any_matches_it() -> None:
    """`subparse` stops at a block whose first token matches an end token by type alone, or by type and value."""
    source = "a{% x %}b{% endfor %}c{% for y in z %}{% endfor %}"
    for end_tokens in [("name",), ("name:x",), ("name:endfor", "name:else"), ("name:endfor:x",)]:
        fast, slow = FastParser(_ENV, source), jinja2.parser.Parser(_ENV, source)
        assert parsed_body(fast, end_tokens) == parsed_body(slow, end_tokens), end_tokens


def parsed_body(parser: jinja2.parser.Parser, end_tokens: tuple[str, ...]) -> object:
    try:
        body = parser.subparse(end_tokens)
    except jinja2.TemplateSyntaxError as error:
        return ("error", error.message, error.lineno)
    return dump(body, None), tuple(parser.stream.current)


def test_the_engine_and_the_candidate_reader_parse_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    parses: list[str] = []
    subparse = FastParser.subparse

    def counted(self: FastParser, end_tokens: tuple[str, ...] | None = None) -> list[nodes.Node]:
        if end_tokens is None:
            parses.append(type(self.environment).__name__)
        return subparse(self, end_tokens)

    monkeypatch.setattr(FastParser, "subparse", counted)
    Jinja2Renderer("{{ x }}")
    find_candidates("{{ y }}")
    assert parses == ["_LimitedSandbox", "_SourceEnvironment"]


def test_the_jinja2_engine_keeps_jinja2s_tree(zoo: tuple[ZooTemplate, ...]) -> None:
    """The tree the engine compiles and hands to the candidate reader, environment set on every node, is jinja2's."""
    for template in zoo[:40]:
        source = template.read()
        renderer = Jinja2Renderer(source)
        environment = renderer._env
        assert dump(renderer.source_tree(), environment) == parsed(jinja2.parser.Parser, source, environment)
