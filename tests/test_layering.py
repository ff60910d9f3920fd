"""The one contract (STYLE.md, "Layering"): detecting writes Caps, everything after it reads Caps.

Every module under src/chatcaps is read and each of its imports resolved: top-level ones, those inside functions and
`TYPE_CHECKING` blocks, relative ones, `from chatcaps import probes`, and `importlib.import_module("...")` with a
literal name. The rules are data (`LAYERS`, `MAY_IMPORT`; docs/architecture.md draws the same table): a module
belongs to the first layer whose prefix it has, and a new module lands in the front unless a layer claims it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import DOCS

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "chatcaps"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("detector", ("chatcaps.probes", "chatcaps.detect")),
    (
        "base",
        (
            "chatcaps.caps",
            "chatcaps.vocab",
            "chatcaps.errors",
            "chatcaps.constants",
            "chatcaps.defaults",
            "chatcaps.engines",
            "chatcaps.encoders",
            "chatcaps.sources",
            "chatcaps.transport",
            "chatcaps.request",
            "chatcaps.events",
            "chatcaps.lru",
        ),
    ),
    ("wire", ("chatcaps.wire",)),
    ("reply side", ("chatcaps.reply", "chatcaps.output")),
    (
        "render side",
        (
            "chatcaps.render",
            "chatcaps.continuation",
            "chatcaps.polyfills",
            "chatcaps.intent",
            "chatcaps.contexts",
            "chatcaps.outcome",
            "chatcaps.matrix",
            "chatcaps.zoo",
        ),
    ),
)
"""Layers by module prefix, first match wins; every other module (the hook, serve, the integrations, the CLI, the
package's `__init__`) is the front, which may import any layer but the probes."""
FRONT = "front"

MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "base": ("base",),
    "detector": ("base", "detector"),
    "wire": ("base", "wire"),
    "reply side": ("base", "wire", "reply side"),
    "render side": ("base", "wire", "reply side", "render side", "chatcaps.detect"),
    FRONT: ("base", "wire", "reply side", "render side", "chatcaps.detect", FRONT),
}
"""What each layer may import: layers by name, single modules by name. Detection writes Caps and everything after it
reads Caps; the render side reaches the detector only through `chatcaps.detect.detect_caps`; the reply side reads a
reply with what a render hands it (`ReplyContext`) and never needs the renderer; OpenAI's shapes (`chatcaps.wire`)
are plain data under everything that answers in them."""


def _covers(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> str:
    return next((name for name, prefixes in LAYERS if any(_covers(p, module) for p in prefixes)), FRONT)


def _allowed(layer: str, module: str) -> bool:
    """`layer` may import `module`: the package itself (a way to reach a submodule, checked on its own), a layer it
    may import, or a module it is allowed by name."""
    if module == PACKAGE or not _covers(PACKAGE, module):
        return True
    allowed = MAY_IMPORT[layer]
    return layer_of(module) in allowed or any(_covers(name, module) for name in allowed if name.startswith(PACKAGE))


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
    """Each import statement of `module` that its layer may not make, as "module:line imports name (the layer must
    not import the other layer)"; one per statement, naming the first name it imports that is not allowed."""
    layer = layer_of(module)
    found: dict[int, str] = {}
    for line, name in imports(source, module, is_package=is_package):
        if line not in found and not _allowed(layer, name):
            found[line] = f"{module}:{line} imports {name} (the {layer} must not import the {layer_of(name)})"
    return list(found.values())


MODULES = sorted(SRC.joinpath(PACKAGE).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_module_keeps_to_its_layer(path: Path) -> None:
    assert violations(path.read_text(), module_name(path), is_package=path.name == "__init__.py") == []


def test_every_layer_has_its_modules() -> None:
    """The table names real modules: a renamed package would otherwise leave its rule guarding nothing."""
    layers = {layer_of(module_name(path)) for path in MODULES}
    assert layers == {*MAY_IMPORT}
    assert layer_of("chatcaps.probes.reasoning") == "detector"
    assert layer_of("chatcaps.vocab") == "base"
    assert layer_of("chatcaps.wire.openai") == "wire"
    assert layer_of("chatcaps.wire.anthropic") == "wire"
    assert layer_of("chatcaps.wire.fields") == "wire"
    assert layer_of("chatcaps.request") == "base"
    assert layer_of("chatcaps.events") == "base"
    assert layer_of("chatcaps.reply.blocks") == "reply side"
    assert layer_of("chatcaps.reply.parse") == "reply side"
    assert layer_of("chatcaps.render") == "render side"
    assert layer_of("chatcaps.serve.app") == FRONT
    assert layer_of("chatcaps.serve.anthropic") == FRONT
    assert layer_of("chatcaps.serve.visibility") == FRONT
    assert layer_of("chatcaps.serve.pipeline") == FRONT


def test_vocab_imports_nothing_of_chatcaps() -> None:
    """caps.py takes its words from vocab.py: vocab importing caps back, even for types only, would be a circle."""
    source = SRC.joinpath(PACKAGE, "vocab.py").read_text()
    assert [name for _, name in imports(source, "chatcaps.vocab") if _covers(PACKAGE, name)] == []


NEUTRAL = ("chatcaps.events", "chatcaps.request", "chatcaps.reply.call_stream", "chatcaps.reply.blocks")
"""What belongs to no API: a reply's events, the canonical request, the reader of calls and the block segmenter.
None of them imports a wire module (each API writes them in its own shapes, in `chatcaps.wire`)."""


@pytest.mark.parametrize("module", NEUTRAL)
def test_neutral_modules_import_no_wire(module: str) -> None:
    path = SRC.joinpath(*module.split(".")).with_suffix(".py")
    assert [name for _, name in imports(path.read_text(), module) if _covers(WIRE, name)] == []


def test_events_import_nothing_but_the_standard_library() -> None:
    source = SRC.joinpath(PACKAGE, "events.py").read_text()
    assert [name for _, name in imports(source, "chatcaps.events") if _covers(PACKAGE, name)] == []


PIPELINE = "chatcaps.serve.pipeline"
PIPELINE_ONLY = ("chatcaps.hook.prerender", "chatcaps.hook.PostStream", "chatcaps.reply.constraint")
"""What turns a request into a prompt, a grammar and an answer: in `chatcaps serve`, only the pipeline reaches them
(the playground, which answers no API, renders on its own)."""


def _generates(source: str) -> bool:
    """`source` asks a backend to generate (`backend.generate(...)`)."""
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "generate"
        for node in ast.walk(ast.parse(source))
    )


@pytest.mark.parametrize("path", sorted(SRC.joinpath(PACKAGE, "serve").glob("*.py")), ids=lambda path: path.stem)
def test_one_pipeline_serves_every_api(path: Path) -> None:
    """A route reads its body into a `ChatRequest` (its wire module) and hands it to the pipeline, with its encoder:
    it renders nothing, builds no grammar and generates nothing itself."""
    module = module_name(path)
    if module in (PIPELINE, "chatcaps.serve.playground"):
        return
    found = [name for _, name in imports(path.read_text(), module) if any(_covers(n, name) for n in PIPELINE_ONLY)]
    allowed = {"chatcaps.reply.constraint", "chatcaps.reply.constraint.Constraint"}  # the backends apply grammars
    assert [name for name in found if name not in allowed] == []
    assert not _generates(path.read_text()) or path.stem in ("local", "upstream")


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        (
            "from chatcaps.probes.reasoning import Markers\n",
            "chatcaps.render",
            ["chatcaps.render:1 imports chatcaps.probes.reasoning (the render side must not import the detector)"],
        ),
        (
            "from chatcaps.probes import text\n",
            "chatcaps.polyfills.content",
            ["chatcaps.polyfills.content:1 imports chatcaps.probes (the render side must not import the detector)"],
        ),
        (
            "from chatcaps import probes\n",
            "chatcaps.hook",
            ["chatcaps.hook:1 imports chatcaps.probes (the front must not import the detector)"],
        ),
        (
            "from ..probes.forms import BLOCK_FORMS\n",
            "chatcaps.polyfills.reasoning",
            [
                "chatcaps.polyfills.reasoning:1 imports chatcaps.probes.forms "
                "(the render side must not import the detector)"
            ],
        ),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import chatcaps.probes.controls\n",
            "chatcaps.intent",
            ["chatcaps.intent:3 imports chatcaps.probes.controls (the render side must not import the detector)"],
        ),
        (
            "def f():\n    from chatcaps.probes.text import shows\n    return shows\n",
            "chatcaps.serve",
            ["chatcaps.serve:2 imports chatcaps.probes.text (the front must not import the detector)"],
        ),
        (
            "import importlib\nprobes = importlib.import_module('chatcaps.probes')\n",
            "chatcaps.output",
            ["chatcaps.output:2 imports chatcaps.probes (the reply side must not import the detector)"],
        ),
        (
            "from chatcaps.render import ChatTemplate\n",
            "chatcaps.probes.prober",
            ["chatcaps.probes.prober:1 imports chatcaps.render (the detector must not import the render side)"],
        ),
        (
            "from chatcaps.render import RenderResult\n",
            "chatcaps.reply.parse",
            ["chatcaps.reply.parse:1 imports chatcaps.render (the reply side must not import the render side)"],
        ),
        (
            "from chatcaps.hook import choice\n",
            "chatcaps.reply.parse",
            ["chatcaps.reply.parse:1 imports chatcaps.hook (the reply side must not import the front)"],
        ),
        (
            "from chatcaps.reply import Reply\n",
            "chatcaps.wire.openai",
            ["chatcaps.wire.openai:1 imports chatcaps.reply (the wire must not import the reply side)"],
        ),
        (
            "from chatcaps.serve.app import create_app\n",
            "chatcaps.render",
            ["chatcaps.render:1 imports chatcaps.serve.app (the render side must not import the front)"],
        ),
        (
            "from . import intent\n",
            "chatcaps.probes",
            [],  # relative to the package itself: chatcaps.probes.intent, a detector module
        ),
        (
            "from .. import intent\n",
            "chatcaps.probes.controls",
            ["chatcaps.probes.controls:1 imports chatcaps.intent (the detector must not import the render side)"],
        ),
        ("from chatcaps.detect import detect_caps\n", "chatcaps.render", []),
        ("from chatcaps.wire.openai import tool_call\nfrom chatcaps.caps import Caps\n", "chatcaps.reply.parse", []),
        ("from chatcaps.reply import parse_reply\nfrom chatcaps import sources\n", "chatcaps.render", []),
        ("from chatcaps.vocab import Markers\nfrom chatcaps.engines import Renderer\n", "chatcaps.probes.x", []),
    ],
)
def test_the_rule_catches_every_kind_of_import(source: str, module: str, expected: list[str]) -> None:
    is_package = module == "chatcaps.probes"
    assert violations(source, module, is_package=is_package) == expected


def test_the_architecture_page_draws_the_same_table() -> None:
    """docs/architecture.md's layer table names the same modules per layer as `LAYERS` (the front: every other)."""
    page = (DOCS / "architecture.md").read_text("utf-8")
    table = page[page.index("| layer | modules | may import |") :].split("\n\n")[0].splitlines()[2:]
    drawn = {}
    for row in table:
        layer, modules, _ = (cell.strip() for cell in row.strip("|").split("|"))
        names = re.findall(r"`([\w/]+)`", modules)
        drawn[layer] = tuple(f"{PACKAGE}.{name.rstrip('/')}" for name in names if name != "__init__")
    assert {layer: drawn[layer] for layer, _ in LAYERS} == dict(LAYERS)
    assert set(drawn) == {*MAY_IMPORT}


WIRE_KEYS = frozenset({"finish_reason", "choices", "delta", "usage", "completion_tokens", "logprobs"})
"""Keys only OpenAI's response shapes have: a dict literal holding one builds such a shape."""
WIRE_VALUES = frozenset({"chat.completion", "chat.completion.chunk"})
WIRE = "chatcaps.wire"


def wire_shapes(source: str) -> list[int]:
    """The lines of `source` that write an OpenAI response shape themselves: a dict literal with a key only those
    shapes have, a `tool_calls` delta (a list of dicts keyed by "index"), or a chunk's or completion's `object`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
            deltas = [
                value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and key.value == "tool_calls" and isinstance(value, ast.List)
            ]
            indexed = any(
                isinstance(item, ast.Dict)
                and any(isinstance(k, ast.Constant) and k.value == "index" for k in item.keys)
                for delta in deltas
                for item in delta.elts
            )
            if keys & WIRE_KEYS or indexed:
                lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and node.value in WIRE_VALUES:
            lines.append(node.lineno)
    return sorted(set(lines))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_openai_shapes_are_written_only_in_the_wire(path: Path) -> None:
    """Each wire concept has one home (`chatcaps.wire.openai`): everything else builds OpenAI's JSON through it."""
    if _covers(WIRE, module_name(path)):
        return
    assert wire_shapes(path.read_text()) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('{"index": 0, "delta": delta, "finish_reason": None}\n', [1]),
        ('x = {"tool_calls": [{"index": 1, "function": {"arguments": piece}}]}\n', [1]),
        ('chunk = {"object": "chat.completion.chunk"}\n', [1]),
        ('message = {**message, "tool_calls": calls}\nturn = {"tool_calls": [call]}\n', []),
        ('{"role": "assistant", "content": text}\n', []),
    ],
)
def test_the_wire_rule_finds_each_shape(source: str, expected: list[int]) -> None:
    assert wire_shapes(source) == expected


NAMES = frozenset(module_name(path) for path in MODULES)


def _module_of(name: str) -> str | None:
    """The chatcaps module (or package) `name` is or lives in: its longest prefix that is one."""
    while name and name not in NAMES:
        name = name.rpartition(".")[0]
    return name if name and name != PACKAGE else None


def import_graph() -> dict[str, set[str]]:
    """Each chatcaps module and the chatcaps modules its import statements name, wherever they sit: `from package
    import module` names the module (the package's `__init__` runs first, but is not what is imported)."""
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        module = module_name(path)
        by_line: dict[int, list[str]] = {}
        for line, name in imports(path.read_text(), module, is_package=path.name == "__init__.py"):
            by_line.setdefault(line, []).append(name)
        named: set[str | None] = set()
        for names in by_line.values():
            base, *members = names  # `imports` gives a statement's module first, then `module.member` per member
            submodules = {_module_of(member) for member in members} - {_module_of(base)}
            named |= submodules if submodules else {_module_of(name) for name in names}
        graph[module] = {name for name in named if name is not None and name != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in order:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], order[other])
        if low[node] == order[node]:
            group: list[str] = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return found


def test_no_module_imports_itself_back() -> None:
    """No import circle, at any depth and wherever the import sits (a lazy import or a `TYPE_CHECKING` one included):
    caps <-> vocab and isolation <-> minijinja_engine were two."""
    assert cycles(import_graph()) == []


def test_the_circle_rule_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


LAZY_EXTRAS = {"llama_cpp": ("chatcaps.integrations.llamacpp",)}
"""Third-party packages of an extra (llama-cpp-python, `chatcaps[llamacpp]`) and the modules that may import them:
only inside a function, so that importing chatcaps (and `chatcaps serve` without a grammar) never needs them. The
grammar module needs none: its JSON schemas are converted by chatcaps itself (docs/constrained.md)."""


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_extras_imported_lazily_where_allowed(path: Path) -> None:
    module = module_name(path)
    wrong = []
    for line, name in imports(path.read_text(), module, is_package=path.name == "__init__.py"):
        for extra, allowed in LAZY_EXTRAS.items():
            if _covers(extra, name) and module not in allowed:
                wrong.append(f"{module}:{line} imports {name}")
    for node in ast.parse(path.read_text()).body:  # a module's own statements (`if TYPE_CHECKING:` blocks aside)
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            top = [name for name in names if any(_covers(extra, name) for extra in LAZY_EXTRAS)]
            wrong += [f"{module}:{node.lineno} imports {name} at the top" for name in top]
    assert wrong == []
