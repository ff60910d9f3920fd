"""The one contract (STYLE.md, "Layering"): detecting writes Caps, everything after it reads Caps.

Every module under src/chatcaps is read and each of its imports resolved: top-level ones, those inside functions and
`TYPE_CHECKING` blocks, relative ones, `from chatcaps import probes`, and `importlib.import_module("...")` with a
literal name. The rules are data (`LAYERS`, `RULES`): a module belongs to the first layer whose prefix it has, and a
new module (the reply side, serve) lands in the render side unless a layer claims it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "chatcaps"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("detector", ("chatcaps.probes", "chatcaps.detect")),
    ("base", ("chatcaps.caps", "chatcaps.vocab", "chatcaps.errors", "chatcaps.engines", "chatcaps.constants")),
)
"""Layers by module prefix, first match wins; every other module is on the render side."""
RENDER_SIDE = "render side"

READERS = (
    "chatcaps.render",
    "chatcaps.polyfills",
    "chatcaps.intent",
    "chatcaps.output",
    "chatcaps.hook",
    "chatcaps.integrations",
    "chatcaps.reply",
    "chatcaps.serve",
)
"""What reads Caps after detection (the reply side and serve included before they exist)."""
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (RENDER_SIDE, ("chatcaps.probes",)),
    ("detector", READERS),
    ("base", ("chatcaps.probes", "chatcaps.detect", *READERS)),
)
"""(layer, module prefixes it must never import). The render side reaches the detector only through
`chatcaps.detect.detect_caps`; the probes never reach back into what reads Caps; the base layer reaches neither."""


def _covers(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> str:
    return next((name for name, prefixes in LAYERS if any(_covers(p, module) for p in prefixes)), RENDER_SIDE)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(source: str, module: str, *, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, module imported) for every import in `source`, wherever it sits; `from a import b` yields `a.b` too,
    as `b` may be a module."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Each import statement of `module` that its layer's rule forbids, as "module:line imports name (the layer must
    not import prefix)"; one per statement, naming the module it imports from where that alone is forbidden."""
    layer = layer_of(module)
    forbidden = next((prefixes for name, prefixes in RULES if name == layer), ())
    found: dict[int, str] = {}
    for line, name in imports(source, module, is_package=is_package):
        hit = next((prefix for prefix in forbidden if _covers(prefix, name)), None)
        if hit is not None and line not in found:
            found[line] = f"{module}:{line} imports {name} (the {layer} must not import {hit})"
    return list(found.values())


MODULES = sorted(SRC.joinpath(PACKAGE).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_module_keeps_to_its_layer(path: Path) -> None:
    assert violations(path.read_text(), module_name(path), is_package=path.name == "__init__.py") == []


def test_every_layer_has_its_modules() -> None:
    """The table names real modules: a renamed package would otherwise leave its rule guarding nothing."""
    layers = {layer_of(module_name(path)) for path in MODULES}
    assert layers == {"detector", "base", RENDER_SIDE}
    assert layer_of("chatcaps.probes.reasoning") == "detector"
    assert layer_of("chatcaps.vocab") == "base"
    assert layer_of("chatcaps.render") == RENDER_SIDE
    assert layer_of("chatcaps.reply.stream") == RENDER_SIDE  # modules to come are covered as they appear


def test_vocab_imports_nothing_of_chatcaps() -> None:
    """caps.py takes its words from vocab.py: vocab importing caps back, even for types only, would be a circle."""
    source = SRC.joinpath(PACKAGE, "vocab.py").read_text()
    assert [name for _, name in imports(source, "chatcaps.vocab") if _covers(PACKAGE, name)] == []


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        (
            "from chatcaps.probes.reasoning import Markers\n",
            "chatcaps.render",
            ["chatcaps.render:1 imports chatcaps.probes.reasoning (the render side must not import chatcaps.probes)"],
        ),
        (
            "from chatcaps.probes import text\n",
            "chatcaps.polyfills.content",
            ["chatcaps.polyfills.content:1 imports chatcaps.probes (the render side must not import chatcaps.probes)"],
        ),
        (
            "from chatcaps import probes\n",
            "chatcaps.hook",
            ["chatcaps.hook:1 imports chatcaps.probes (the render side must not import chatcaps.probes)"],
        ),
        (
            "from ..probes.forms import BLOCK_FORMS\n",
            "chatcaps.polyfills.reasoning",
            [
                "chatcaps.polyfills.reasoning:1 imports chatcaps.probes.forms "
                "(the render side must not import chatcaps.probes)"
            ],
        ),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import chatcaps.probes.controls\n",
            "chatcaps.intent",
            ["chatcaps.intent:3 imports chatcaps.probes.controls (the render side must not import chatcaps.probes)"],
        ),
        (
            "def f():\n    from chatcaps.probes.text import shows\n    return shows\n",
            "chatcaps.serve",
            ["chatcaps.serve:2 imports chatcaps.probes.text (the render side must not import chatcaps.probes)"],
        ),
        (
            "import importlib\nprobes = importlib.import_module('chatcaps.probes')\n",
            "chatcaps.output",
            ["chatcaps.output:2 imports chatcaps.probes (the render side must not import chatcaps.probes)"],
        ),
        (
            "from chatcaps.render import ChatTemplate\n",
            "chatcaps.probes.prober",
            ["chatcaps.probes.prober:1 imports chatcaps.render (the detector must not import chatcaps.render)"],
        ),
        (
            "from . import intent\n",
            "chatcaps.probes",
            [],  # relative to the package itself: chatcaps.probes.intent, a detector module
        ),
        (
            "from .. import intent\n",
            "chatcaps.probes.controls",
            [
                "chatcaps.probes.controls:1 imports chatcaps.intent (the detector must not import chatcaps.intent)",
            ],
        ),
        ("from chatcaps.detect import detect_caps\n", "chatcaps.render", []),
        ("from chatcaps.vocab import Markers\nfrom chatcaps.engines import Renderer\n", "chatcaps.probes.x", []),
    ],
)
def test_the_rule_catches_every_kind_of_import(source: str, module: str, expected: list[str]) -> None:
    is_package = module == "chatcaps.probes"
    assert violations(source, module, is_package=is_package) == expected
