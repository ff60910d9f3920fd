"""Candidates to probe, read from a chat template's source: keyword arguments, their values, fields and markers.

Reading the source only proposes what to try; whether a template really supports a feature is decided by rendering
probe conversations with it. So this module over-proposes on purpose and stays cheap: one jinja2 parse (jinja2's
tokens and tree, from `lexer.FastLexer` and `parser.FastParser`), jinja2's own scope analysis for the variables, one
pass over `{% set %}` statements for aliases, one walk for the rest.

    variables       names the template reads but neither defines nor gets from transformers (enable_thinking, ...)
    values          per variable, the constants the template compares it with or falls back to
    message_fields  attribute and key names the template reads (reasoning_content, thinking, tool_plan, ...)
    block_types     strings compared with a `.type` (content blocks: "thinking", "image", ...)
    flags           strings looked for in text with `in`, or removed from it with `.replace` ("/no_think", ...)
    whole_flags     strings a message's whole content is compared with (`content == "detailed thinking on"`)
    literals        every string constant, for proposing reasoning marker pairs ("<think>", "</think>", ...)
    reads_items     whether it walks a mapping's items or values (`.items()`, `| items`, `| dictsort`): it may then
                    print fields it never names
    containers      variables a value is looked up in (`name in builtin_tools`): list-valued, to be probed holding
                    a call's name
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

import jinja2
import jinja2.nodes as nodes
from jinja2.idtracking import FrameSymbolVisitor, RootVisitor, Symbols
from jinja2.lexer import Lexer
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chatcaps.engines.jinja2_engine import TRANSFORMERS_SYNTAX, syntax_error, too_deep
from chatcaps.engines.lexer import fast_lexer
from chatcaps.engines.parser import FastParser
from chatcaps.vocab import STANDARD_VARIABLES

JSON = str | int | float | bool | None

_COMPARE_OPS = frozenset({"eq", "ne", "lt", "gt", "lteq", "gteq"})
_MEMBER_OPS = frozenset({"in", "notin"})
_EQUALITY_TESTS = frozenset({"sameas", "eq", "equalto", "==", "ne", "!="})
_CONSTANT_TESTS: Mapping[str, JSON] = MappingProxyType({"true": True, "false": False, "none": None})
_DEFAULT_FILTERS = frozenset({"default", "d"})
_TRANSPARENT_FILTERS = frozenset({"lower", "upper", "string", "trim"})
_CONSTANTS = frozenset({nodes.Const, nodes.TemplateData})
_ITEM_FILTERS = frozenset({"items", "dictsort"})
_ITEM_METHODS = frozenset({"items", "values"})
_LEAVES = _CONSTANTS | {nodes.Name, nodes.NSRef}
"""Nodes with no child nodes: the walks skip looking for them (a fifth of all nodes are constants, a quarter names)."""
# jinja2 lists these nodes' fields in an order other than the source's; the walk takes them in source order.
_SOURCE_ORDER: Mapping[type[nodes.Node], tuple[str, ...]] = MappingProxyType(
    {
        nodes.CondExpr: ("expr1", "test", "expr2"),
        nodes.For: ("target", "iter", "test", "body", "else_"),
    }
)


@dataclass(frozen=True)
class Candidates:
    """What the source suggests probing; tuples are deduplicated, in source order but for `variables` (sorted)."""

    variables: tuple[str, ...]
    values: Mapping[str, tuple[JSON, ...]]
    message_fields: tuple[str, ...]
    block_types: tuple[str, ...]
    flags: tuple[str, ...]
    literals: tuple[str, ...]
    reads_items: bool = False
    whole_flags: tuple[str, ...] = ()
    containers: tuple[str, ...] = ()


class _SourceEnvironment(ImmutableSandboxedEnvironment):
    """The jinja2 engine's syntax, lexed by `FastLexer` (the same tokens, faster)."""

    @property
    def lexer(self) -> Lexer:
        return fast_lexer(self)


_ENV = _SourceEnvironment(**TRANSFORMERS_SYNTAX)


def find_candidates(source: str, *, name: str = "<template>", tree: nodes.Template | None = None) -> Candidates:
    """Parse `source` (unless `tree` is its parse, as the jinja2 engine hands it over: `Renderer.source_tree`) and
    propose what to probe; raises chatcaps' TemplateSyntaxError, naming `name`, when it does not parse (at the line
    and column the engines report)."""
    if tree is None:
        try:
            # `Environment.parse` without its last step, a walk that hands every node the environment: only constant
            # folding needs it, and the collector reads constants as written.
            tree = nodes.Template(FastParser(_ENV, source).subparse(), lineno=1)
        except jinja2.TemplateSyntaxError as error:
            raise syntax_error(error, source, name) from error
        except RecursionError:
            raise too_deep(source, name) from None
    variables = tuple(sorted(_undeclared(tree) - STANDARD_VARIABLES))
    collector = _Collector()
    collector.find_aliases(tree)
    collector.visit(tree)
    return Candidates(
        variables=variables,
        values=MappingProxyType({name: tuple(collector.values.get(name, {}).values()) for name in variables}),
        message_fields=tuple(collector.message_fields),
        block_types=tuple(collector.block_types),
        flags=tuple(collector.flags),
        literals=tuple(collector.literals),
        reads_items=collector.reads_items,
        whole_flags=tuple(flag for flag in collector.whole_flags if flag not in collector.flags),
        containers=tuple(name for name in collector.containers if name in variables),
    )


def _undeclared(tree: nodes.Template) -> set[str]:
    """What `jinja2.meta.find_undeclared_variables` returns, at an eighth of the cost.

    jinja2's function generates the template's whole Python code to learn which names its scopes resolve from the
    context (and folds constants in the tree while at it). Only the scopes matter: this opens the same ones the
    compiler does (the template, each for-loop branch, macro, call/filter/with/set block, scope, block), with the
    parameters it declares in them, and has jinja2's own symbol tracker find the names each resolves.
    """
    found: set[str] = set()
    _scope(tree, None, tree.body, found, specials=("self",))
    return found - _ENV.globals.keys()


def _scope(
    node: nodes.Node,
    parent: Symbols | None,
    body: list[nodes.Node],
    found: set[str],
    specials: tuple[str, ...] = (),
    **branch: str,
) -> None:
    symbols = Symbols(parent)
    for name in specials:
        symbols.declare_parameter(name)
    _RootSymbols(symbols).visit(node, **branch)  # what `symbols.analyze_node(node, **branch)` does, faster
    found.update(param for action, param in symbols.loads.values() if action == "resolve")
    for statement in body:
        _open_scopes(statement, symbols, found)


def _open_scopes(node: nodes.Node, symbols: Symbols, found: set[str]) -> None:
    """The scopes a statement opens, as the compiler opens them (an `if` opens none; expressions never do)."""
    if isinstance(node, nodes.For):
        _scope(node, symbols, node.body, found, specials=("loop",), for_branch="body")
        if node.else_:
            _scope(node, symbols, node.else_, found, for_branch="else")
        if node.test is not None:
            _scope(node, symbols, [], found, for_branch="test")
    elif isinstance(node, nodes.Macro | nodes.CallBlock):
        _scope(node, symbols, node.body, found, specials=("caller", "kwargs", "varargs"))
    elif isinstance(node, nodes.FilterBlock | nodes.With | nodes.AssignBlock | nodes.Scope | nodes.OverlayScope):
        _scope(node, symbols, node.body, found)
    elif isinstance(node, nodes.Block):
        _scope(node, None, node.body, found, specials=("self", "super"))
    elif isinstance(node, nodes.If):
        for statement in [*node.body, *node.elif_, *node.else_]:
            _open_scopes(statement, symbols, found)


class _FrameSymbols(FrameSymbolVisitor):
    """jinja2's symbol tracker, visiting through `_visitor` and reading child nodes directly: jinja2 builds each
    method's name and walks two nested generators per node, which was most of the scope analysis' time."""

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        method = _visitor(_FrameSymbols, type(node))
        if method is not None:
            return method(self, node, *args, **kwargs)
        return self.generic_visit(node, *args, **kwargs)

    def generic_visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        for child in _children(node, node.fields):
            if type(child) not in _CONSTANTS:  # no symbols in them, nor a method for them
                self.visit(child, *args, **kwargs)


class _RootSymbols(RootVisitor):
    """jinja2's visitor for a scope's own node, handing the scope's contents to `_FrameSymbols`."""

    def __init__(self, symbols: Symbols) -> None:
        self.sym_visitor = _FrameSymbols(symbols)


@cache
def _visitor(visitor: type, node: type[nodes.Node]) -> Callable[..., Any] | None:
    """The method `visitor` has for `node`, as jinja2's `NodeVisitor.get_visitor` finds it, looked up once."""
    method: Callable[..., Any] | None = getattr(visitor, f"visit_{node.__name__}", None)
    return method


def _json_const(node: nodes.Node) -> tuple[bool, JSON]:
    """(True, value) for a constant that JSON can carry (jinja2 parses `-1` as the negation of the constant 1)."""
    if isinstance(node, nodes.Neg) and isinstance(node.node, nodes.Const) and type(node.node.value) in (int, float):
        return True, -node.node.value
    if isinstance(node, nodes.Const) and (node.value is None or isinstance(node.value, str | int | float | bool)):
        return True, node.value
    return False, None


def _str_const(node: nodes.Node | None) -> str | None:
    return node.value if isinstance(node, nodes.Const) and isinstance(node.value, str) else None


def _is_type_read(node: nodes.Node) -> bool:
    """`x.type`, `x["type"]`, or either under a case or string filter: what a content block's kind is read from."""
    while isinstance(node, nodes.Filter) and node.name in _TRANSPARENT_FILTERS and node.node is not None:
        node = node.node
    if isinstance(node, nodes.Getattr):
        return node.attr == "type"
    return isinstance(node, nodes.Getitem) and _str_const(node.arg) == "type"


def _listed(node: nodes.Node) -> list[nodes.Node]:
    """The items of a list or tuple literal (the right side of `x in [...]`), else nothing."""
    return list(node.items) if isinstance(node, nodes.List | nodes.Tuple) else []


@dataclass
class _Collector:
    """Walks the tree once in source order, filling ordered sets (dicts with None values) for each field.

    It records values for every name it sees compared; `find_candidates` keeps those of the template's variables.
    """

    aliases: dict[str, str] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)
    values: defaultdict[str, dict[tuple[type, JSON], JSON]] = field(default_factory=lambda: defaultdict(dict))
    message_fields: dict[str, None] = field(default_factory=dict)
    block_types: dict[str, None] = field(default_factory=dict)
    flags: dict[str, None] = field(default_factory=dict)
    literals: dict[str, None] = field(default_factory=dict)
    reads_items: bool = False
    contents: set[str] = field(default_factory=set)
    """Names (`x`, `ns.x`) set from a message's content: `system_message = messages[0]['content']`."""
    whole_flags: dict[str, None] = field(default_factory=dict)
    containers: dict[str, None] = field(default_factory=dict)

    def find_aliases(self, tree: nodes.Template) -> None:
        """Names (`x`, or `ns.x` for a namespace attribute) set from another name stand for it in comparisons.

        Assignments are taken in source order, so a chain (`x = var`, then `y = x`) resolves to `var`.
        """
        for assign in _assignments(tree.body):
            target = _target_key(assign.target)
            if target is None:
                continue
            value = assign.node
            if isinstance(value, nodes.Call) and isinstance(value.node, nodes.Name) and value.node.name == "namespace":
                self.namespaces.add(target)
            source = self.resolve(value)
            if source is not None:
                self.aliases.setdefault(target, source)
            if self.reads_content(value):
                self.contents.add(target)

    def reads_content(self, node: nodes.Node) -> bool:
        """`x.content`, `x["content"]`, or a name set from one, behind a case or string filter or not."""
        while isinstance(node, nodes.Filter) and node.name in _TRANSPARENT_FILTERS and node.node is not None:
            node = node.node
        if isinstance(node, nodes.Getattr):
            return node.attr == "content" or _target_key(node) in self.contents
        if isinstance(node, nodes.Getitem):
            return _str_const(node.arg) == "content"
        return _target_key(node) in self.contents

    def resolve(self, node: nodes.Node) -> str | None:
        """The name an expression stands for: itself, what it aliases, or either behind a default or a case filter."""
        if isinstance(node, nodes.Name):
            return self.aliases.get(node.name, node.name)
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name):
            return self.aliases.get(f"{node.node.name}.{node.attr}")
        if isinstance(node, nodes.NSRef):
            return self.aliases.get(f"{node.name}.{node.attr}")
        if isinstance(node, nodes.Filter) and node.name in _DEFAULT_FILTERS | _TRANSPARENT_FILTERS:
            return self.resolve(node.node) if node.node is not None else None
        if isinstance(node, nodes.Or) and _json_const(node.right)[0]:
            return self.resolve(node.left)
        if isinstance(node, nodes.CondExpr):
            fallback = self._conditional_fallback(node)
            return fallback[0] if fallback else None
        return None

    def _conditional_fallback(self, node: nodes.CondExpr) -> tuple[str, JSON] | None:
        """`var if var is defined else c` (either way round): the variable and its fallback constant."""
        tested = {self.resolve(read) for read in node.test.find_all((nodes.Name, nodes.Getattr))}
        for kept, other in ((node.expr1, node.expr2), (node.expr2, node.expr1)):
            name = self.resolve(kept) if kept is not None else None
            is_const, value = _json_const(other) if other is not None else (False, None)
            if name is not None and is_const and name in tested:
                return name, value
        return None

    def record(self, node: nodes.Node, value: nodes.Node) -> None:
        """`value` is a candidate for the variable `node` stands for, when both are what they should be."""
        name = self.resolve(node)
        is_const, constant = _json_const(value)
        if name is not None and is_const:
            self.add(name, constant)

    def add(self, name: str, value: JSON) -> None:
        """Keyed by type too: `True == 1` in Python, but they are different candidates for a template."""
        self.values[name].setdefault((type(value), value), value)

    def visit(self, node: nodes.Node, parent: nodes.Node | None = None) -> None:
        handler = _visitor(_Collector, type(node))
        if handler is not None:
            handler(self, node, parent)
        if type(node) not in _LEAVES:
            for child in _children(node):
                self.visit(child, node)

    def visit_Const(self, node: nodes.Const, parent: nodes.Node | None) -> None:
        if isinstance(node.value, str):
            self.literals.setdefault(node.value)

    def visit_Assign(self, node: nodes.Assign, parent: nodes.Node | None) -> None:
        """`{% set var = c %}` after `{% if var is not defined %}` is a default value, like `var | default(c)`."""
        self.record(node.target, node.node)

    def visit_Compare(self, node: nodes.Compare, parent: nodes.Node | None) -> None:
        left = node.expr
        for operand in node.ops:
            right = operand.expr
            if operand.op in _COMPARE_OPS:
                self.record(left, right)
                self.record(right, left)
            if operand.op in {"eq", "ne"} | _MEMBER_OPS:
                self._record_block_types(left, right, operand.op)
            if operand.op in {"eq", "ne"}:
                self._record_whole_flag(left, right)
            if operand.op in _MEMBER_OPS:
                for item in _listed(right):
                    self.record(left, item)
                container = self.resolve(right)
                if container is not None:
                    self.containers.setdefault(container)
                flag = _str_const(left)
                if flag is not None and not isinstance(right, nodes.Const | nodes.List | nodes.Tuple):
                    self.flags.setdefault(flag)
            left = right

    def _record_whole_flag(self, left: nodes.Expr, right: nodes.Expr) -> None:
        """A string a message's whole content is compared with: a flag that is the entire text of its turn."""
        for read, constant in ((left, right), (right, left)):
            flag = _str_const(constant)
            if flag and flag.strip() and self.reads_content(read):
                self.whole_flags.setdefault(flag)

    def _record_block_types(self, left: nodes.Expr, right: nodes.Expr, op: str) -> None:
        pairs = [(left, item) for item in _listed(right)] if op in _MEMBER_OPS else [(left, right), (right, left)]
        for read, constant in pairs:
            kind = _str_const(constant)
            if kind is not None and _is_type_read(read):
                self.block_types.setdefault(kind)

    def visit_Test(self, node: nodes.Test, parent: nodes.Node | None) -> None:
        if node.name in _CONSTANT_TESTS:
            self.record(node.node, nodes.Const(_CONSTANT_TESTS[node.name]))
        elif node.name in _EQUALITY_TESTS and node.args:
            self.record(node.node, node.args[0])

    def visit_Filter(self, node: nodes.Filter, parent: nodes.Node | None) -> None:
        """`var | default(c)`; and `selectattr("type", "equalto", c)`, which reads a field and compares a `.type`."""
        self.reads_items = self.reads_items or node.name in _ITEM_FILTERS
        if node.name in _DEFAULT_FILTERS and node.node is not None and node.args:
            self.record(node.node, node.args[0])
        if node.name in {"selectattr", "rejectattr"} and node.args:
            attribute = _str_const(node.args[0])
            if attribute is not None:
                self.message_fields.setdefault(attribute)
            kind = _str_const(node.args[2]) if len(node.args) > 2 else None
            if attribute == "type" and _str_const(node.args[1]) in _EQUALITY_TESTS and kind is not None:
                self.block_types.setdefault(kind)

    def visit_Or(self, node: nodes.Or, parent: nodes.Node | None) -> None:
        self.record(node.left, node.right)

    def visit_CondExpr(self, node: nodes.CondExpr, parent: nodes.Node | None) -> None:
        fallback = self._conditional_fallback(node)
        if fallback is not None:
            self.add(*fallback)

    def visit_Getattr(self, node: nodes.Getattr, parent: nodes.Node | None) -> None:
        """A field read, unless it is a method being called (`x.strip()`) or state (`ns.x`, `loop.first`)."""
        is_method = isinstance(parent, nodes.Call) and parent.node is node
        is_state = isinstance(node.node, nodes.Name) and (node.node.name in self.namespaces or node.node.name == "loop")
        if not (is_method or is_state):
            self.message_fields.setdefault(node.attr)

    def visit_Getitem(self, node: nodes.Getitem, parent: nodes.Node | None) -> None:
        key = _str_const(node.arg)
        if key is not None:
            self.message_fields.setdefault(key)

    def visit_Call(self, node: nodes.Call, parent: nodes.Node | None) -> None:
        """`x.get("field")` reads a field; `x.replace(flag, "")` strips a flag from text."""
        if not isinstance(node.node, nodes.Getattr):
            return
        self.reads_items = self.reads_items or node.node.attr in _ITEM_METHODS
        if not node.args:
            return
        first = _str_const(node.args[0])
        if first is not None and node.node.attr == "get":
            self.message_fields.setdefault(first)
        elif first is not None and node.node.attr == "replace":
            self.flags.setdefault(first)


def _target_key(target: nodes.Node) -> str | None:
    """The key an assignment target is known by: `x` for `{% set x %}`, `ns.x` for `{% set ns.x %}` (read back as
    `ns.x`, a `Getattr`)."""
    if isinstance(target, nodes.Name):
        return target.name
    if isinstance(target, nodes.NSRef):
        return f"{target.name}.{target.attr}"
    if isinstance(target, nodes.Getattr) and isinstance(target.node, nodes.Name):
        return f"{target.node.name}.{target.attr}"
    return None


def _children(node: nodes.Node, fields: tuple[str, ...] | None = None) -> Iterator[nodes.Node]:
    """A node's children in source order (jinja2's field order, except for the nodes listed in `_SOURCE_ORDER`), or
    in the order of `fields`; `Node.iter_child_nodes` does the same for jinja2's order at twice the cost."""
    for name in fields if fields is not None else _SOURCE_ORDER.get(type(node), node.fields):
        value = getattr(node, name, None)
        if isinstance(value, nodes.Node):
            yield value
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, nodes.Node):
                    yield item


def _assignments(body: list[nodes.Node]) -> Iterator[nodes.Assign]:
    """The `{% set %}` statements under `body`, in source order. Statements sit only in statements' bodies, never
    inside an expression, so this walks statements alone (`tree.find_all(nodes.Assign)` walks every node)."""
    for node in body:
        if isinstance(node, nodes.Assign):
            yield node
        elif isinstance(node, nodes.Stmt):
            yield from _assignments([child for child in _children(node) if isinstance(child, nodes.Stmt)])
