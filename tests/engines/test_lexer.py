"""FastLexer: exactly jinja2's tokens (type, value and line), or jinja2's own lexer where it does not apply."""

from __future__ import annotations

import random
import re

import jinja2
import jinja2.lexer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chatcaps.engines.jinja2_engine import TRANSFORMERS_SYNTAX
from chatcaps.engines.lexer import _FIRST, FastLexer, FastToken
from chatcaps.probes.candidates import _ENV
from chatcaps.zoo import ZooTemplate

JINJA2 = jinja2.lexer.Lexer(ImmutableSandboxedEnvironment(**TRANSFORMERS_SYNTAX))
FAST = _ENV.lexer

Tokens = list[tuple[object, ...]] | tuple[str, str | None, int]


def tokens(lexer: jinja2.lexer.Lexer, source: str) -> Tokens:
    try:
        return [tuple(token) for token in lexer.tokenize(source)]
    except jinja2.TemplateSyntaxError as error:
        return ("error", error.message, error.lineno)


def takes_fast_path(source: str) -> bool:
    try:
        FAST._tokens(source)  # type: ignore[attr-defined]
    except Exception:
        return False
    return True


EDGES = [
    "",
    "plain text\n",
    "a\r\nb\rc\n\n",
    "{{ x }}\n",
    "  {% if a %}\n    x\n  {% endif %}  \ny",
    "{%- if a -%}\n  x  \n{%+ endif +%}  y",
    "\n\n   {{- a -}}   \n\n{{+ b }}",
    "{# one #}\n  {#- two -#}  {#+ three\n #}\n    {# four #}\nx",
    "{{ {'a': {'b': [1, (2, 3)]}}}}",
    "{% set x = {'k': 'v'} %}{{ x }}",
    "{{ 'a\\nb' ~ \"q\\\"\\u00e9\\x41\" ~ 'multi\nline' }}",
    "{{ 1_000 + 0b1 + 0o7 + 0XfF + 1.5E-3 + 2e5 + 0.5 + 0 + 00 }}",
    "{{ x.1 }}{{ x[1:2] }}{{ a // b ** c != d % e }}{{ -1 }}{{ a -b }}",
    "{{ é }}{{ a\n.b\n }}",
    "{%\n set\n z\n =\n 1\n%}\n{{ z }}",
    "{% raw %}{{ not a tag }}{% endraw %}",
    "  {% raw -%}  x  {%- endraw %}\n",
    "{{ (a }}",
    "{{ a ) }}",
    "{{ a ] }}",
    "{{ 'unterminated }}",
    "{{ a @ b }}",
    "{{ a",
    "{# unterminated",
    "{% raw %} unterminated",
    "{{ '\\N{nope}' }}",
    "{{ x } }}",
    "}} {% %} %}",
    "{{ a }}}",
    "{%- generation -%}{{ m.reasoning }}{%- endgeneration -%}",
    "{{ a if b else c }}{% for x, y in z if x recursive %}{{ loop(y) }}{% else %}-{% endfor %}",
    "\n",
    "\r\n",
    "x\r",
    "{{ x }}\r\n\r\n",
    "é {{ a }} {{ 'é' }}",
    "{{ ·a }}",
    "{{ a· }}",
    "{{ f(a)[0]{'k': (1, [2])} }}{% if (a) %}x{% endif %}{{ (a) ~ [b] }}",
    "{{ [a, (b, {'c': d})] }}}}",
    "{{ .5 }}{{ 1. }}{{ 1.e3 }}{{ 1_2.3_4e+5_6 }}{{ 0b_1 }}{{ 0X_F }}",
    "{{ x\n}}\n{%- if a -%}\n\n{%- endif -%}\n\n{%+ if b +%}\n{% endif %}\n",
    "{{ '%}' }}{% set x = '}}' %}{{ \"{{\" }}",
    "{{ 'é中😀\u2028' ~ \"a\\tb\\u00e9\" ~ 'x\\'y' ~ '' ~ \"\" }}",
]


@pytest.mark.parametrize("source", EDGES)
def test_edge_cases_give_jinja2s_tokens_or_its_error(source: str) -> None:
    assert tokens(FAST, source) == tokens(JINJA2, source)


def test_the_fast_path_covers_the_ordinary_cases() -> None:
    assert takes_fast_path("  {%- if a -%}\n{{ {'a': [1]}}}{# c #}{{ 'x' ~ 1.5 }}{% endif %}")
    assert not takes_fast_path("{% raw %}x{% endraw %}")
    assert not takes_fast_path("{{ (a }}")


def test_every_zoo_template_lexes_as_jinja2_does_on_the_fast_path(zoo_template: ZooTemplate) -> None:
    source = zoo_template.read()
    assert takes_fast_path(source)
    assert tokens(FAST, source) == tokens(JINJA2, source)


def test_zoo_templates_with_whitespace_control_and_newlines_changed(zoo: tuple[ZooTemplate, ...]) -> None:
    """Toggles `-`/`+` on tag ends and changes whitespace at random (fixed seed), where lstrip/trim rules bite."""
    rng = random.Random(0)
    sources = [template.read() for template in zoo]
    for _ in range(400):
        source = rng.choice(sources)
        for _ in range(rng.randrange(1, 6)):
            if rng.random() < 0.6:
                tags = [match.start() for match in re.finditer(r"\{%|%\}|\{\{|\}\}|\{#|#\}", source)]
                at, sign = rng.choice(tags), rng.choice(["-", "+", ""])
                tag = source[at : at + 2]
                source = source[:at] + (tag + sign if tag[0] == "{" else sign + tag) + source[at + 2 :]
            else:
                spaces = [match.start() for match in re.finditer(r"\s", source)]
                at = rng.choice(spaces)
                source = source[:at] + rng.choice([" ", "\n", "\t", "\r\n", "  \n  ", ""]) + source[at + 1 :]
        assert tokens(FAST, source) == tokens(JINJA2, source), source


TAG_PIECES = ["{{", "}}", "{%", "%}", "{#", "#}", "-", "+"]
CODE_PIECES = ["x", "if", "endif", "raw", "endraw", "1", "0x1f", "2.5e3", "1_0", ".", "(", ")", "[", "]", "{", "}"]
MORE_PIECES = [":", ",", "|", "~", "==", "**", "//", "é", "@", "!", "'s'", '"d\\"q"', "'\\n'", "text "]
SPACE_PIECES = [" ", "\n", "\r\n", "\t"]
PIECES = st.sampled_from(TAG_PIECES + CODE_PIECES + MORE_PIECES + SPACE_PIECES)


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_any_source_lexes_as_jinja2_lexes_it(source: str) -> None:
    assert tokens(FAST, source) == tokens(JINJA2, source)


def test_the_tokens_are_jinja2_tokens_whose_test_agrees() -> None:
    [first, *_] = FAST.tokenize("{{ x }}")
    assert isinstance(first, FastToken) and isinstance(first, jinja2.lexer.Token)
    name = next(token for token in FAST.tokenize("{% for x in y %}{% endfor %}") if token.value == "for")
    plain = jinja2.lexer.Token(*name)
    for expr in ["name", "name:for", "name:if", "block_begin", "name:for:x", "for", ("name:for",)]:
        assert name.test(expr) == plain.test(expr)  # type: ignore[arg-type]


def test_an_environment_with_line_statements_gets_jinja2s_lexer() -> None:
    environment = ImmutableSandboxedEnvironment(line_statement_prefix="#")
    lexer = FastLexer(environment)
    source = "# if x\ny\n# endif\n"
    assert [tuple(token) for token in lexer.tokenize(source)] == tokens(jinja2.lexer.Lexer(environment), source)
    assert not any(isinstance(token, FastToken) for token in lexer.tokenize(source))


def test_the_first_character_lookaheads_take_whatever_their_rule_starts_with() -> None:
    """`_FIRST`'s lookaheads only skip a rule that could not match there: every start of a match passes them."""
    rests = ["", "0", "1", "5.5", "0e1", "_1", ".5", "x", "b1", "'", '"', "a'", 'a"', "\\'", "\n'"]
    for pattern, lookahead in _FIRST.items():
        first = re.compile(lookahead)
        for code in [*range(0x3000), *range(0xFF00, 0xFFFF), *range(0x1D7CE, 0x1D800)]:
            for rest in rests:
                text = chr(code) + rest
                assert not pattern.match(text) or first.match(text), (pattern.pattern, text)


def test_jinja2s_unescaping_gives_a_string_without_a_backslash_back() -> None:
    """Why FastLexer unescapes only a string with a backslash: every other character, alone or side by side, comes
    back as it was (surrogates included)."""
    text = "".join(chr(code) for code in range(0x110000) if code != ord("\\"))
    assert text.encode("ascii", "backslashreplace").decode("unicode-escape") == text
