"""`FastParser`: jinja2's parser, giving the same tree (node types, fields, values and `lineno` on every node, the
attributes in the order `Node.__init__` sets them) and the same errors, in half the time.

Lexing and parsing a chat template's source were a third of a cold minijinja detection at the median (1.4 of 3.8 ms,
the parse 0.8 of it), and the jinja2 engine compiles every template through the same parser. The lexer is already
`FastLexer`; the parser's time went to (a) the recursive-descent chain every operand walks down (`parse_expression`,
`parse_condexpr`, `parse_or`, ... `parse_pow`, `parse_unary`, `parse_primary`, `parse_postfix`,
`parse_filter_expr`): a Python frame and a few token tests per level, though most operands are a name or a constant
followed by the tag's end; and (b) `Node.__init__`, which checks the arity of every node it makes.

What this class changes, each a measured gain over the zoo (`scripts/bench_parse.py`):

- `parse_expression` runs the levels from `parse_condexpr` to `parse_pow` in one frame (`_chain`). Every level starts
  at the same token, so at the same line; after the first operand each level's loop runs in turn, innermost first,
  as the nested calls would on their way out, with the line of each later node taken as jinja2 takes it (the
  current token's, after the previous right operand). When the token after the first operand continues no level
  (the commonest case by far), it returns at once.
- `parse_unary` makes names and constants itself and enters jinja2's postfix and filter loops only when the next
  token starts one.
- `parse_subscript`, `parse_tuple`, `subparse`, `parse_statements` and `parse_if` are jinja2's, with the commonest
  nodes made directly (`object.__new__` and the attributes set in `Node.__init__`'s order) and token tests written
  as comparisons of type and value.

Everything else is inherited: the other statements, literals, calls, filters and tests, assignment targets and
extensions' tags. The errors the methods above raise are jinja2's (same exception, message and line, at the same
token). The token stream is jinja2's own: FastLexer already hands it a list, and a list-indexed stream was no faster.
One difference is not in the tree: an operand takes five Python frames here for jinja2's fourteen, so a template
nested deeply enough to exhaust Python's recursion limit in jinja2's parser (some 70 parentheses deep) can parse here
(up to some 200).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any, TypeVar

import jinja2.parser
from jinja2 import nodes
from jinja2.lexer import describe_token

_new = object.__new__
"""A node without `Node.__init__`: the builders below set its attributes as that would, in the same order."""
_N = TypeVar("_N", bound=nodes.Node)

# The levels of jinja2's expression chain, loosest first: parse_condexpr, parse_or, parse_and, parse_not,
# parse_compare, parse_math1, parse_concat, parse_math2, parse_pow (then parse_unary).
_CONDEXPR, _OR, _AND, _NOT, _COMPARE, _MATH1, _CONCAT, _MATH2, _POW = range(9)
_COMPARE_OPERATORS = frozenset({"eq", "ne", "lt", "lteq", "gt", "gteq"})
_MATH1_NODES: Mapping[str, type[nodes.BinExpr]] = MappingProxyType({"add": nodes.Add, "sub": nodes.Sub})
_MATH2_NODES: Mapping[str, type[nodes.BinExpr]] = MappingProxyType(
    {"mul": nodes.Mul, "div": nodes.Div, "floordiv": nodes.FloorDiv, "mod": nodes.Mod}
)
_OPERATOR_TYPES = _COMPARE_OPERATORS | _MATH1_NODES.keys() | _MATH2_NODES.keys() | {"tilde", "pow", "name"}
"""Token types that may continue an expression after an operand (a name only if it is one of `_NAME_OPERATORS`)."""
_NAME_OPERATORS = frozenset({"if", "or", "and", "not", "in"})
_BOOLEANS: Mapping[str, bool] = MappingProxyType({"true": True, "True": True, "false": False, "False": False})
_NONES = frozenset({"none", "None"})
_POSTFIX = frozenset({"dot", "lbracket", "lparen"})
_TUPLE_ENDS = frozenset({"variable_end", "block_end", "rparen"})


def _make(cls: type[_N], lineno: int, *fields: Any) -> _N:
    """`cls(*fields, lineno=lineno)` as `Node.__init__` makes it (fields in order, then lineno and environment),
    without its checks. The commonest nodes have a builder each below, setting their attributes without this loop:
    this one for every node parsed 2.5% slower over the zoo (docs/engines.md)."""
    node: _N = _new(cls)
    for name, value in zip(cls.fields, fields, strict=True):
        setattr(node, name, value)
    node.lineno = lineno
    node.environment = None
    return node


def _name(name: str, lineno: int) -> nodes.Name:
    node: nodes.Name = _new(nodes.Name)
    node.name = name
    node.ctx = "load"
    node.lineno = lineno
    node.environment = None
    return node


def _const(value: Any, lineno: int) -> nodes.Const:
    node: nodes.Const = _new(nodes.Const)
    node.value = value
    node.lineno = lineno
    node.environment = None
    return node


def _binary(cls: type[nodes.BinExpr], left: nodes.Expr, right: nodes.Expr, lineno: int) -> nodes.BinExpr:
    node: nodes.BinExpr = _new(cls)
    node.left = left
    node.right = right
    node.lineno = lineno
    node.environment = None
    return node


def _unary(cls: type[nodes.UnaryExpr], operand: nodes.Expr, lineno: int) -> nodes.UnaryExpr:
    node: nodes.UnaryExpr = _new(cls)
    node.node = operand
    node.lineno = lineno
    node.environment = None
    return node


def _getattr(obj: nodes.Expr, attr: str, lineno: int) -> nodes.Getattr:
    node: nodes.Getattr = _new(nodes.Getattr)
    node.node = obj
    node.attr = attr
    node.ctx = "load"
    node.lineno = lineno
    node.environment = None
    return node


def _getitem(obj: nodes.Expr, arg: nodes.Expr, lineno: int) -> nodes.Getitem:
    node: nodes.Getitem = _new(nodes.Getitem)
    node.node = obj
    node.arg = arg
    node.ctx = "load"
    node.lineno = lineno
    node.environment = None
    return node


def _operand(op: str, expr: nodes.Expr) -> nodes.Operand:
    node: nodes.Operand = _new(nodes.Operand)
    node.op = op
    node.expr = expr
    node.lineno = None  # type: ignore[assignment]  # as jinja2's parser makes it
    node.environment = None
    return node


def _template_data(data: str, lineno: int) -> nodes.TemplateData:
    node: nodes.TemplateData = _new(nodes.TemplateData)
    node.data = data
    node.lineno = lineno
    node.environment = None
    return node


def _output(children: list[nodes.Node], lineno: int) -> nodes.Output:
    node: nodes.Output = _new(nodes.Output)
    node.nodes = children  # type: ignore[assignment]
    node.lineno = lineno
    node.environment = None
    return node


@lru_cache(maxsize=256)
def _ends(end_tokens: tuple[str, ...]) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """`end_tokens` as what `Token.test_any(*end_tokens)` matches: token types, and (type, value) pairs."""
    splits = [expr.partition(":") for expr in end_tokens]
    return frozenset(end_tokens), frozenset((kind, value) for kind, colon, value in splits if colon)


class FastParser(jinja2.parser.Parser):
    """A jinja2 `Parser` giving its tree and errors in half the time (see the module docstring)."""

    def parse_expression(self, with_condexpr: bool = True) -> nodes.Expr:
        return self._chain(_CONDEXPR if with_condexpr else _OR)

    def _chain(self, top: int) -> nodes.Expr:
        """jinja2's chain from level `top` (parse_condexpr ... parse_pow) in one frame: every level starts at the
        same token, so at the same line, and after the first operand each level's loop runs in turn, innermost
        first, exactly as the nested calls would run them on the way out."""
        stream = self.stream
        token = stream.current
        lineno = token.lineno
        left: nodes.Expr
        if top <= _NOT and token.type == "name" and token.value == "not":
            next(stream)
            left = _unary(nodes.Not, self._chain(_NOT), lineno)
        else:
            left = self.parse_unary()
            token = stream.current
            kind = token.type
            if kind not in _OPERATOR_TYPES or (kind == "name" and token.value not in _NAME_OPERATORS):
                return left
            at = lineno
            while stream.current.type == "pow":
                next(stream)
                left = _binary(nodes.Pow, left, self.parse_unary(), at)
                at = stream.current.lineno
            if top <= _MATH2:
                at = lineno
                while (kind := stream.current.type) in _MATH2_NODES:
                    next(stream)
                    left = _binary(_MATH2_NODES[kind], left, self._chain(_POW), at)
                    at = stream.current.lineno
            if top <= _CONCAT and stream.current.type == "tilde":
                args = [left]
                while stream.current.type == "tilde":
                    next(stream)
                    args.append(self._chain(_MATH2))
                left = _make(nodes.Concat, lineno, args)
            if top <= _MATH1:
                at = lineno
                while (kind := stream.current.type) in _MATH1_NODES:
                    next(stream)
                    left = _binary(_MATH1_NODES[kind], left, self._chain(_CONCAT), at)
                    at = stream.current.lineno
            if top <= _COMPARE:
                left = self._compare(left, lineno)
        if top <= _AND:
            at = lineno
            while (token := stream.current).type == "name" and token.value == "and":
                next(stream)
                left = _binary(nodes.And, left, self._chain(_NOT), at)
                at = stream.current.lineno
        if top <= _OR:
            at = lineno
            while (token := stream.current).type == "name" and token.value == "or":
                next(stream)
                left = _binary(nodes.Or, left, self._chain(_AND), at)
                at = stream.current.lineno
        if top <= _CONDEXPR:
            at = lineno
            while (token := stream.current).type == "name" and token.value == "if":
                next(stream)
                test = self._chain(_OR)
                otherwise: nodes.Expr | None = None
                if (token := stream.current).type == "name" and token.value == "else":
                    next(stream)
                    otherwise = self._chain(_CONDEXPR)
                left = _make(nodes.CondExpr, at, test, left, otherwise)
                at = stream.current.lineno
        return left

    def _compare(self, expr: nodes.Expr, lineno: int) -> nodes.Expr:
        """jinja2's `parse_compare` loop after its first operand."""
        stream = self.stream
        ops = []
        while True:
            token = stream.current
            kind = token.type
            if kind in _COMPARE_OPERATORS:
                next(stream)
                ops.append(_operand(kind, self._chain(_MATH1)))
            elif kind == "name" and token.value == "in":
                next(stream)
                ops.append(_operand("in", self._chain(_MATH1)))
            elif kind == "name" and token.value == "not" and stream.look().test("name:in"):
                stream.skip(2)
                ops.append(_operand("notin", self._chain(_MATH1)))
            else:
                break
            lineno = stream.current.lineno
        if not ops:
            return expr
        return _make(nodes.Compare, lineno, expr, ops)

    def parse_unary(self, with_filter: bool = True) -> nodes.Expr:
        """jinja2's `parse_unary` with the commonest primaries (names, constants) made here, and the postfix and
        filter loops entered only when the next token starts one."""
        stream = self.stream
        token = stream.current
        kind = token.type
        lineno = token.lineno
        node: nodes.Expr
        if kind == "name":
            next(stream)
            value = token.value
            if value in _BOOLEANS:
                node = _const(_BOOLEANS[value], lineno)
            elif value in _NONES:
                node = _const(None, lineno)
            else:
                node = _name(value, lineno)
        elif kind == "string":
            next(stream)
            parts = [token.value]
            while stream.current.type == "string":
                parts.append(stream.current.value)
                next(stream)
            node = _const("".join(parts), lineno)
        elif kind == "integer" or kind == "float":
            next(stream)
            node = _const(token.value, lineno)
        elif kind == "sub":
            next(stream)
            node = _unary(nodes.Neg, self.parse_unary(False), lineno)
        elif kind == "add":
            next(stream)
            node = _unary(nodes.Pos, self.parse_unary(False), lineno)
        else:
            node = self.parse_primary()
        if stream.current.type in _POSTFIX:
            node = self.parse_postfix(node)
        if with_filter:
            token = stream.current
            kind = token.type
            if kind == "pipe" or kind == "lparen" or (kind == "name" and token.value == "is"):
                node = self.parse_filter_expr(node)
        return node

    def parse_subscript(self, node: nodes.Expr) -> nodes.Getattr | nodes.Getitem:
        """jinja2's `parse_subscript` (`.name`, `.0`, `[...]`), its nodes made directly."""
        stream = self.stream
        token = next(stream)
        if token.type == "dot":
            attr_token = next(stream)
            if attr_token.type == "name":
                return _getattr(node, attr_token.value, token.lineno)
            if attr_token.type != "integer":
                self.fail("expected name or number", attr_token.lineno)
            return _getitem(node, _const(attr_token.value, attr_token.lineno), token.lineno)
        if token.type == "lbracket":
            args: list[nodes.Expr] = []
            while stream.current.type != "rbracket":
                if args:
                    stream.expect("comma")
                args.append(self.parse_subscribed())
            stream.expect("rbracket")
            arg = args[0] if len(args) == 1 else _make(nodes.Tuple, token.lineno, args, "load")
            return _getitem(node, arg, token.lineno)
        self.fail("expected subscript expression", token.lineno)

    def parse_tuple(
        self,
        simplified: bool = False,
        with_condexpr: bool = True,
        extra_end_rules: tuple[str, ...] | None = None,
        explicit_parentheses: bool = False,
        with_namespace: bool = False,
    ) -> nodes.Tuple | nodes.Expr:
        """jinja2's `parse_tuple` without the closure it makes at every call."""
        stream = self.stream
        lineno = stream.current.lineno
        args: list[nodes.Expr] = []
        is_tuple = False
        while True:
            if args:
                stream.expect("comma")
            if stream.current.type in _TUPLE_ENDS or (
                extra_end_rules is not None and self.is_tuple_end(extra_end_rules)
            ):
                break
            if simplified:
                args.append(self.parse_primary(with_namespace=with_namespace))
            else:
                args.append(self.parse_expression(with_condexpr=with_condexpr))
            if stream.current.type != "comma":
                break
            is_tuple = True
            lineno = stream.current.lineno
        if not is_tuple:
            if args:
                return args[0]
            if not explicit_parentheses:
                self.fail(f"Expected an expression, got {describe_token(stream.current)!r}")
        return _make(nodes.Tuple, lineno, args, "load")

    def subparse(self, end_tokens: tuple[str, ...] | None = None) -> list[nodes.Node]:
        """jinja2's `subparse`, with the end tokens tested once per tag as a set and its nodes made directly."""
        stream = self.stream
        body: list[nodes.Node] = []
        data: list[nodes.Node] = []
        ends = _ends(tuple(end_tokens)) if end_tokens is not None else None
        if end_tokens is not None:
            self._end_token_stack.append(end_tokens)
        try:
            while stream:
                token = stream.current
                kind = token.type
                if kind == "data":
                    if token.value:
                        data.append(_template_data(token.value, token.lineno))
                    next(stream)
                elif kind == "variable_begin":
                    next(stream)
                    data.append(self.parse_tuple(with_condexpr=True))
                    if stream.current.type == "variable_end":
                        next(stream)
                    else:
                        stream.expect("variable_end")
                elif kind == "block_begin":
                    if data:
                        body.append(_output(data, data[0].lineno))
                        data = []
                    next(stream)
                    if ends is not None:
                        token = stream.current
                        if token.type in ends[0] or (token.type, token.value) in ends[1]:
                            return body
                    statement = self.parse_statement()
                    if isinstance(statement, list):
                        body.extend(statement)
                    else:
                        body.append(statement)
                    if stream.current.type == "block_end":
                        next(stream)
                    else:
                        stream.expect("block_end")
                else:
                    raise AssertionError("internal parsing error")
            if data:
                body.append(_output(data, data[0].lineno))
        finally:
            if end_tokens is not None:
                self._end_token_stack.pop()
        return body

    def parse_statements(self, end_tokens: tuple[str, ...], drop_needle: bool = False) -> list[nodes.Node]:
        """jinja2's `parse_statements`, its token tests written as comparisons."""
        stream = self.stream
        if stream.current.type == "colon":
            next(stream)
        if stream.current.type == "block_end":
            next(stream)
        else:
            stream.expect("block_end")
        result = self.subparse(end_tokens)
        if stream.current.type == "eof":
            self.fail_eof(end_tokens)
        if drop_needle:
            next(stream)
        return result

    def parse_if(self) -> nodes.If:
        """jinja2's `parse_if`, its nodes made directly (attributes set in jinja2's order: lineno and environment by
        the constructor, then the fields)."""
        stream = self.stream
        lineno = stream.expect("name:if").lineno
        node: nodes.If = _new(nodes.If)
        node.lineno = lineno
        node.environment = None
        result = node
        while True:
            node.test = self.parse_tuple(with_condexpr=False)
            node.body = self.parse_statements(("name:elif", "name:else", "name:endif"))
            node.elif_ = []
            node.else_ = []
            token = next(stream)
            if token.type == "name" and token.value == "elif":
                node = _new(nodes.If)
                node.lineno = stream.current.lineno
                node.environment = None
                result.elif_.append(node)
                continue
            if token.type == "name" and token.value == "else":
                result.else_ = self.parse_statements(("name:endif",), drop_needle=True)
            break
        return result
