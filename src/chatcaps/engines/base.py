"""What every engine offers: the `Renderer` protocol and the sandbox `Limits` it enforces."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

EngineName = Literal["jinja2", "minijinja"]
ENGINE_NAMES: tuple[EngineName, ...] = ("jinja2", "minijinja")


@dataclass(frozen=True)
class Limits:
    """Bounds on one render of an untrusted template.

    A limit that is hit raises `RenderLimitError` whose `limit` is the field name below.
    """

    time_s: float = 2.0
    """Wall-clock budget of one render. jinja2: a watchdog interrupts the rendering thread; minijinja: fuel."""
    max_output_chars: int = 32 * 1024 * 1024
    """Longest prompt a render may produce (a 1M-token prompt is about 4M characters)."""
    max_recursion: int = 64
    """Deepest nesting of macro calls (jinja2; minijinja's own limit is fixed near 80, see docs/engines.md)."""
    max_operand_chars: int = 8 * 1024 * 1024
    """Largest string or list a single `*` (repetition) or `**` (power, in bits) may build (jinja2)."""
    minijinja_fuel_per_s: int = 20_000_000
    """minijinja instructions per second of `time_s`; measured ~40M/s on a 2-core CI machine, halved for margin."""


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
