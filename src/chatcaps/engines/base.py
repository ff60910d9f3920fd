"""What every engine offers: the `Renderer` protocol and the sandbox `Limits` it enforces."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from jinja2.nodes import Template

EngineName = Literal["jinja2", "minijinja", "encoder"]
"""The Jinja engines, and "encoder": a model's prompt encoder (`chatcaps.encoders`), which compiles no template text."""
ENGINE_NAMES: tuple[EngineName, ...] = ("jinja2", "minijinja")
"""The engines that compile a template's text."""


def can_isolate() -> bool:
    """Whether minijinja can render in a capped worker process here (POSIX: Python has the `resource` module), asked
    each time: `isolation.require` asks at compile time, `CAN_ISOLATE` once for `Limits`' default."""
    return importlib.util.find_spec("resource") is not None


CAN_ISOLATE = can_isolate()
"""`can_isolate()` when chatcaps was imported: `Limits.isolate`'s default."""


@dataclass(frozen=True)
class Limits:
    """Bounds on one render of an untrusted template.

    A limit that is hit raises `RenderLimitError` whose `limit` is the field name below.
    """

    time_s: float = 2.0
    """Wall-clock budget of one render. jinja2: a watchdog interrupts the rendering thread; minijinja: fuel, and
    isolated, the caller kills the worker at `time_s` + 0.25 s."""
    max_output_chars: int = 32 * 1024 * 1024
    """Longest prompt a render may produce (a 1M-token prompt is about 4M characters)."""
    max_recursion: int = 64
    """Deepest nesting of macro calls (jinja2; minijinja's own limit is fixed near 80, see docs/engines.md)."""
    max_operand_chars: int = 32 * 1024 * 1024
    """Longest string (or list, in items) one template operation may build: `~`, `+`, `*`, `%`, `str.format`, and
    the filters and methods that build strings (join, replace, center, indent, tojson, ...); also the printed size
    of a list or dict. Checked before the value is built where one call could build it at once (jinja2)."""
    max_range: int = 100_000
    """Longest `range()` a template may build (jinja2's sandbox default; minijinja's own limit is fixed at 100,000)."""
    max_int_bits: int = 65536
    """Largest integer `**` or `*` may build (jinja2): multiplying huge integers is one uninterruptible C call whose
    time grows faster than their size. Python prints at most 4300 digits (~14k bits) anyway."""
    max_memory_bytes: int | None = 1024 * 1024 * 1024
    """How much the process' resident memory may grow while a render runs. jinja2: the watchdog samples it every
    20 ms; process-wide, so allocations by other threads during the render count too; not enforced where the
    process' memory cannot be read (no /proc and no `resource` module, e.g. Windows). minijinja: the fuel budget
    holds the data a render builds under it (64 bytes per fuel), and isolated, the worker's address space is capped
    at its start plus this. None turns the check off."""
    minijinja_fuel_per_s: int = 5_000_000
    """minijinja fuel per second of `time_s` (fewer where `max_memory_bytes` sets the budget: see
    `minijinja_engine.fuel_budget`). One fuel is one instruction or 64 bytes of data built; measured on a 2-core
    machine: 35-43 M instructions/s, but 4-13 M fuel/s for a template that builds data (doubling a string), so a
    budget at 5 M/s ends both within `time_s`."""
    isolate: bool = CAN_ISOLATE
    """minijinja: render in a worker process capped at `max_memory_bytes` of address space and killed at `time_s` +
    0.25 s (`engines/isolation.py`), so a runaway template ends in `RenderLimitError` instead of running for minutes
    or aborting the caller's process: some of minijinja's Rust work escapes its fuel, and nothing interrupts it
    in-process. The default where the platform allows it (POSIX). Costs one round trip per render (+~150 us, and
    ~0.2 s to start a worker); `isolate=False` renders in-process, for templates you have vetted. jinja2 ignores it:
    its renders are bounded in-process. Where Python has no `resource` module (Windows) the default is False and
    minijinja refuses True with `InputError`."""
    detect_time_s: float = 10.0
    """Budget of one `detect_caps` (all its probe renders), for templates slow but within `time_s` on each probe:
    once spent, detection stops with `RenderLimitError` naming this field. A probe render that hits any limit stops it
    at once. A whole zoo template detects in 0.2 s or less."""

    def __hash__(self) -> int:
        """Computed once (every field is a number, so the value is the same in every process): Limits are part of
        the key of each cached `detect_caps` and compiled template, looked up on every request."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, name) for name in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", cached)
        return cached


DEFAULT_LIMITS = Limits()


class Renderer(Protocol):
    """A compiled template: compile once, render many times, each render sandboxed and bounded by `limits`."""

    engine: EngineName
    name: str
    """Labels the template in errors (a path, a repo id)."""
    source: str
    limits: Limits

    def render(self, variables: Mapping[str, Any]) -> str:
        """Run the template with exactly these variables (plain JSON data) and return its output."""
        ...

    def undeclared_variables(self) -> frozenset[str]:
        """Names the template reads without defining them: the candidates for kwargs."""
        ...

    def source_tree(self) -> Template | None:
        """jinja2's tree of the source as parsed (no constant folded), handed over once so that reading the source
        (`probes.candidates`) does not parse it again; None where the engine has none or it was handed over."""
        ...
