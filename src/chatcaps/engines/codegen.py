"""`FastCodeGenerator`: jinja2's code generator, writing the same Python code with less work, and leaving the tree
it compiles as parsed.

jinja2 folds constants while it generates code: every expression visitor marked `optimizeconst` first runs the
`Optimizer` over the expression's whole subtree, then visits the children, which run it again over theirs. An
expression n levels deep is folded n times; over the zoo's chat templates (long chains of filters, tests and
operators) that was a fifth of code generation (median 5.1 -> 4.1 ms a template). Folding is idempotent for one
evaluation context, so this generator remembers every node the folder has finished with (and the evaluation
context's autoescape it was folded under) and does not fold it again. The result is the same:
`tests/engines/test_codegen.py` compares the generated code with jinja2's for every zoo template and for templates
written to fold.

jinja2's folder also changes the tree in place; `_CopyingFolder` builds a new node wherever it would change one, so
the parsed tree survives compiling unchanged and the candidate reader (`chatcaps.probes.candidates`) can walk it
instead of parsing the source again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.environment import Environment
from jinja2.optimizer import Optimizer

Visit = Callable[..., Any]
_FOLDING_CODE = optimizeconst(lambda self, node, frame: None).__code__
"""The code of jinja2's `optimizeconst` wrapper: a method whose code this is folds before it visits."""


class _CopyingFolder(Optimizer):
    """jinja2's `Optimizer` without changing the tree it is given: a node whose children fold is copied with the
    folded children. Each node it leaves unfolded is recorded in `folded`, with the autoescape it was folded under."""

    def __init__(self, environment: Environment, folded: dict[int, tuple[nodes.Node, Any]]) -> None:
        super().__init__(environment)
        self.folded = folded

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        return self.generic_visit(node, *args, **kwargs)  # the optimizer has no per-node visitors

    def generic_visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> nodes.Node:
        if type(node) is nodes.Const:  # jinja2 would swap it for an equal Const
            return node
        changed: dict[str, Any] = {}
        for field, old in node.iter_fields():
            if isinstance(old, list):
                new = [self.visit(item, *args) if isinstance(item, nodes.Node) else item for item in old]
                if any(item is not was for item, was in zip(new, old, strict=True)):
                    changed[field] = new
            elif isinstance(old, nodes.Node):
                folded = self.visit(old, *args)
                if folded is not old:
                    changed[field] = folded
        if changed:
            copy = object.__new__(type(node))
            copy.__dict__.update(node.__dict__, **changed)
            node = copy
        eval_ctx = args[0] if args else None
        if isinstance(node, nodes.Expr):
            try:
                return nodes.Const.from_untrusted(
                    node.as_const(eval_ctx), lineno=node.lineno, environment=self.environment
                )
            except nodes.Impossible:
                pass
        self.folded[id(node)] = (node, getattr(eval_ctx, "autoescape", None))
        return node


def _folding_once(visit: Visit) -> Visit:
    """`optimizeconst`, skipping the folder for a node it has finished with under the same autoescape."""

    def visit_folded(self: FastCodeGenerator, node: nodes.Expr, frame: Frame, **kwargs: Any) -> Any:
        if self.optimizer is not None and not frame.eval_ctx.volatile:
            done = self.folded.get(id(node))
            if done is None or done[1] != frame.eval_ctx.autoescape:
                new_node = self.optimizer.visit(node, frame.eval_ctx)
                if id(new_node) in self.folded:  # not folded itself: jinja2 goes on with it, its children folded
                    node = new_node
                elif new_node != node:  # folded into a constant
                    return self.visit(new_node, frame)
        return visit(self, node, frame, **kwargs)

    visit_folded.__name__ = visit.__name__
    visit_folded.__doc__ = visit.__doc__
    visit_folded.__wrapped__ = visit  # type: ignore[attr-defined]
    return visit_folded


def _refold(namespace: dict[str, Any]) -> dict[str, Visit]:
    """Each method in `namespace` wrapped by `optimizeconst`, wrapped by `_folding_once` instead."""
    return {
        name: _folding_once(method.__wrapped__)
        for name, method in namespace.items()
        if getattr(method, "__code__", None) is _FOLDING_CODE
    }


class FastCodeGenerator(CodeGenerator):
    """jinja2's `CodeGenerator`, folding each expression once and copying instead of changing the tree; subclasses'
    `optimizeconst` methods are taken over the same way."""

    def __init__(self, environment: Environment, *args: Any, **kwargs: Any) -> None:
        super().__init__(environment, *args, **kwargs)
        self.folded: dict[int, tuple[nodes.Node, Any]] = {}
        """id(node) -> (the node, kept alive so that its id is not reused; the autoescape it was folded under)."""
        if self.optimizer is not None:
            self.optimizer = _CopyingFolder(environment, self.folded)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, method in _refold(dict(vars(cls))).items():
            setattr(cls, name, method)


for _name, _method in _refold({name: getattr(CodeGenerator, name) for name in dir(CodeGenerator)}).items():
    setattr(FastCodeGenerator, _name, _method)
