"""`FastLexer`: jinja2's lexer, giving the same tokens in well under half the time, for compiling templates (the
jinja2 engine: the same generated code for every zoo template, a sixth less compile time) and reading their sources
(the probes' candidates).

jinja2's lexer tries its rules one regex at a time, yields every token through two generators and drops the
whitespace afterwards; reading a chat template's source spent more time lexing it than parsing it. This lexer uses
jinja2's own regexes, but inside a tag tries them as one alternation in jinja2's order (ordered alternation picks
the rule jinja2 would), with the whitespace before each token folded in, and builds the whole token list at once,
in one loop. Outside tags it applies jinja2's rules for text, comments and whitespace control (`-`, `+`,
trim_blocks, lstrip_blocks) as jinja2 does.

A token costs about a microsecond, half of it the regex, so the loop does little else per token: the rule that
matched is told by `lastindex` (its outermost group, which closes last), the whitespace and the value come from one
`group` call, and a string is unescaped only when it holds a backslash; the float, integer and string rules are
guarded by a lookahead on their first character, so that a match does less work for the same tokens.

Anything out of the ordinary — a `{% raw %}` block, a character no rule takes, unbalanced brackets, an unterminated
tag, comment or string, a name or escape jinja2 refuses — gets jinja2's own lexer instead, so errors and their line
numbers are jinja2's. So does an environment whose rules are not the ones this lexer was written against.
"""

from __future__ import annotations

import re
from ast import literal_eval
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from jinja2 import lexer as jinja2_lexer
from jinja2.lexer import (
    TOKEN_BLOCK_BEGIN,
    TOKEN_BLOCK_END,
    TOKEN_COMMENT_BEGIN,
    TOKEN_DATA,
    TOKEN_FLOAT,
    TOKEN_INTEGER,
    TOKEN_NAME,
    TOKEN_STRING,
    TOKEN_VARIABLE_BEGIN,
    TOKEN_VARIABLE_END,
    Lexer,
    Token,
    TokenStream,
)

_TAG_TOKENS = ("whitespace", TOKEN_FLOAT, TOKEN_INTEGER, TOKEN_NAME, TOKEN_STRING, "operator")
"""jinja2's rules inside a tag, after the one for the tag's end, in the order jinja2 tries them."""
_FIRST: Mapping[re.Pattern[str], str] = MappingProxyType(
    {jinja2_lexer.float_re: r"(?=\d)", jinja2_lexer.integer_re: r"(?=\d)", jinja2_lexer.string_re: "(?=['\"])"}
)
"""A lookahead for the first character a float, an integer and a string can start with in jinja2's rules (checked in
tests/engines/test_lexer.py), put before those rules: a name or an operator, the commonest tokens, fails them at
once (2% of the lexing time). The same matches; a rule that is not one of these patterns gets none."""
_ROOT_TEXT = "(.*?)"
_END = "end"
_OPERATOR = "operator"
_CLOSING: Mapping[str, str] = MappingProxyType({"{": "}", "(": ")", "[": "]"})
_BRACKETS = frozenset((*_CLOSING, *_CLOSING.values()))
_FLAGS = ((re.IGNORECASE, "i"), (re.DOTALL, "s"), (re.VERBOSE, "x"))
_new = tuple.__new__
"""Builds a token without the Python-level `__new__` a NamedTuple has (a token is a plain 3-tuple)."""


class _Unsupported(Exception):
    """The source needs jinja2's own lexer (see the module docstring)."""


class FastToken(Token):
    """A jinja2 `Token` whose `test` splits each `"type:value"` expression once, not at every call (the parser tests
    the current token against the same few expressions again and again)."""

    __slots__ = ()

    def test(self, expr: str) -> bool:
        if not isinstance(expr, str):  # jinja2's parser passes a tuple at times (`is_tuple_end`)
            return super().test(expr)
        if self.type == expr:
            return True
        split = _split(expr)
        return split is not None and split[0] == self.type and split[1] == self.value


@lru_cache(maxsize=1024)
def _split(expr: str) -> tuple[str, str] | None:
    """`"name:endfor"` as `("name", "endfor")`; None for an expression without a value."""
    kind, colon, value = expr.partition(":")
    return (kind, value) if colon else None


def _group(name: str, pattern: re.Pattern[str]) -> str:
    flags = "".join(letter for flag, letter in _FLAGS if pattern.flags & flag)
    return f"(?P<{name}>(?{flags}:{pattern.pattern}))" if flags else f"(?P<{name}>{pattern.pattern})"


class FastLexer(Lexer):
    """A `Lexer` whose `tokenize` (what jinja2's parser calls) works as the module docstring says."""

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        root = self.rules["root"][0].pattern
        self._opener = re.compile(root.pattern.removeprefix(_ROOT_TEXT), root.flags)
        """jinja2's root rule without its leading `(.*?)`, for a search: where that lazy group stops, the first tag
        opening, is where the search finds the first alternative that matches (every tag opening matches one)."""
        self._comment = self.rules[TOKEN_COMMENT_BEGIN][0].pattern
        tag_rules = self.rules[TOKEN_BLOCK_BEGIN][1:]
        body = "|".join(_FIRST.get(rule.pattern, "") + _group(str(rule.tokens), rule.pattern) for rule in tag_rules[1:])
        self._in_tag = {
            state: re.compile(rf"(\s*+)(?:(?P<{_END}>{self.rules[state][0].pattern.pattern})|{body})")
            for state in (TOKEN_BLOCK_BEGIN, TOKEN_VARIABLE_BEGIN)
        }
        self._in_brackets = re.compile(rf"(\s*+)(?:(?P<{_END}>(?!))|{body})")
        """Inside brackets a tag's end is not one (`{{ {'a': 1}}}`): jinja2 skips that rule there. (The end's group,
        which never matches, numbers the others as in `_in_tag`.)"""
        index = self._in_brackets.groupindex
        self._at = tuple(index[name] for name in (_END, TOKEN_NAME, _OPERATOR, TOKEN_STRING, TOKEN_INTEGER))
        """The groups `_tokens` tells the tokens apart by (a match's `lastindex`, the rule's outermost group)."""
        self._supported = (
            environment.newline_sequence == "\n"
            and environment.line_statement_prefix is None
            and environment.line_comment_prefix is None
            and tuple(rule.tokens for rule in tag_rules) == _TAG_TOKENS
            and self.rules[TOKEN_VARIABLE_BEGIN][1:] == tag_rules
            and root.pattern.startswith(_ROOT_TEXT)
            and self.rules["root"][0].command == "#bygroup"
            and all(pattern.groupindex == index for pattern in self._in_tag.values())
        )
        """The rules are the ones this lexer reproduces (no line statements, newlines kept as "\\n")."""

    def tokenize(
        self, source: str, name: str | None = None, filename: str | None = None, state: str | None = None
    ) -> TokenStream:
        if self._supported and state is None:
            try:
                return TokenStream(self._tokens(source), name, filename)
            except (_Unsupported, SyntaxError, ValueError, UnicodeError):
                pass  # jinja2's own lexer raises its own error for these, or takes what this one does not
        return super().tokenize(source, name, filename, state)

    def _tokens(self, source: str) -> list[Token]:
        if "\r" in source:
            source = "\n".join(jinja2_lexer.newline_re.split(source)[::2])
        if not self.keep_trailing_newline and source.endswith("\n"):
            source = source[:-1]
        tokens: list[Token] = []
        append = tokens.append
        search = self._opener.search
        at_end, at_name, at_operator, at_string, at_integer = self._at
        in_brackets = self._in_brackets
        operators = jinja2_lexer.operators
        new = _new
        token = FastToken
        ascii_source = source.isascii()  # then every name is an identifier: a digit starts an integer, not a name
        pos, lineno, line_starting = 0, 1, True
        while pos < len(source):
            match = search(source, pos)
            if match is None:
                append(new(token, (lineno, TOKEN_DATA, source[pos:])))
                break
            kind, index = match.lastgroup, match.lastindex
            if kind is None or index is None:
                raise _Unsupported
            opener, sign = match.group(index, index + 1)
            text = source[pos : match.start()]
            stripped_lines = 0
            if sign == "-":
                stripped = text.rstrip()
                stripped_lines = text.count("\n", len(stripped))
                text = stripped
            elif sign != "+" and self.lstrip_blocks and kind != TOKEN_VARIABLE_BEGIN:
                at = text.rfind("\n") + 1
                if (at > 0 or line_starting) and jinja2_lexer.whitespace_re.fullmatch(text, at):
                    text = text[:at]
            if text:
                append(new(token, (lineno, TOKEN_DATA, text)))
            lineno += text.count("\n") + stripped_lines
            pos = match.end()
            if kind == TOKEN_COMMENT_BEGIN:
                comment = self._comment.match(source, pos)
                if comment is None:
                    raise _Unsupported
                lineno += opener.count("\n") + comment.group().count("\n")
                line_starting = comment.group().endswith("\n")
                pos = comment.end()
                continue
            if kind != TOKEN_BLOCK_BEGIN and kind != TOKEN_VARIABLE_BEGIN:
                raise _Unsupported  # {% raw %}
            append(new(token, (lineno, kind, opener)))
            if "\n" in opener:
                lineno += opener.count("\n")
            in_tag = self._in_tag[kind]
            brackets: list[str] = []
            while True:
                match = (in_brackets if brackets else in_tag).match(source, pos)
                if match is None:
                    raise _Unsupported
                index = match.lastindex
                pos = match.end()
                space, value = match.group(1, index)  # type: ignore[arg-type]  # every alternative is a group
                if "\n" in space:
                    lineno += space.count("\n")
                if index == at_name:
                    if not ascii_source and not value.isidentifier():
                        raise _Unsupported
                    append(new(token, (lineno, TOKEN_NAME, value)))
                elif index == at_operator:
                    if value in _BRACKETS:
                        if value in _CLOSING:
                            brackets.append(_CLOSING[value])
                        elif not brackets or brackets.pop() != value:
                            raise _Unsupported
                    append(new(token, (lineno, operators[value], value)))
                elif index == at_end:
                    end = TOKEN_BLOCK_END if kind == TOKEN_BLOCK_BEGIN else TOKEN_VARIABLE_END
                    append(new(token, (lineno, end, value)))
                    line_starting = value.endswith("\n")
                    if "\n" in value:
                        lineno += value.count("\n")
                    break
                elif index == at_string:
                    unescaped = value[1:-1]
                    if "\\" in unescaped:  # without one, jinja2's unescaping gives the text back
                        unescaped = unescaped.encode("ascii", "backslashreplace").decode("unicode-escape")
                    append(new(token, (lineno, TOKEN_STRING, unescaped)))
                    if "\n" in value:
                        lineno += value.count("\n")
                elif index == at_integer:
                    append(new(token, (lineno, TOKEN_INTEGER, int(value.replace("_", ""), 0))))
                else:
                    append(new(token, (lineno, TOKEN_FLOAT, literal_eval(value.replace("_", "")))))
        return tokens


_KEYS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
)
_LEXERS: dict[tuple[Any, ...], FastLexer] = {}


def fast_lexer(environment: Any) -> FastLexer:
    """One `FastLexer` per set of lexer options, shared as jinja2's `get_lexer` shares its own (building one costs
    tens of microseconds, a compile's worth of lexing for a small template)."""
    key = tuple(getattr(environment, name) for name in _KEYS)
    found = _LEXERS.get(key)
    if found is None:
        found = _LEXERS.setdefault(key, FastLexer(environment))
    return found
