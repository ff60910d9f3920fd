"""Template engines behind one `Renderer` protocol, and the single place a template gets compiled.

Each engine turns its own exceptions into chatcaps errors through one table in its module (`jinja2_engine`,
`minijinja_engine`; the shared rules and the table type in `error_map`), and reports syntax errors at the same
1-based line and column.
"""

from __future__ import annotations

from functools import lru_cache

from chatcaps.defaults import COMPILED_TEMPLATES
from chatcaps.engines.base import DEFAULT_LIMITS, ENGINE_NAMES, EngineName, Limits, Renderer
from chatcaps.engines.conversation import render_conversation
from chatcaps.engines.jinja2_engine import Jinja2Renderer, MutableRenderer
from chatcaps.engines.minijinja_engine import MinijinjaRenderer
from chatcaps.errors import InputError

__all__ = [
    "DEFAULT_LIMITS",
    "ENGINE_NAMES",
    "EngineName",
    "Limits",
    "Renderer",
    "compile_template",
    "mutable_renderer",
    "render_conversation",
]


@lru_cache(maxsize=COMPILED_TEMPLATES)
def compile_template(
    source: str, *, engine: EngineName = "jinja2", name: str = "<template>", limits: Limits = DEFAULT_LIMITS
) -> Renderer:
    """Compile `source` once per (source, engine, name, limits); renderers are immutable and thread-safe to share."""
    if engine == "jinja2":
        return Jinja2Renderer(source, name=name, limits=limits)
    if engine == "minijinja":
        return MinijinjaRenderer(source, name=name, limits=limits)
    if engine == "encoder":  # imported here: the encoders import `engines.base`
        from chatcaps.encoders import compile_encoder

        return compile_encoder(source, name=name, limits=limits)
    raise InputError(f"unknown engine {engine!r}; choose one of {list(ENGINE_NAMES)}")


def mutable_renderer(renderer: Renderer) -> Renderer:
    """`renderer`'s template in transformers' jinja2 environment less its immutability, whichever engine `renderer`
    is (`jinja2_engine.MutableRenderer`): for the probes alone, which read from it what a template writes where the
    sandbox refuses a render because the template changes data it builds (minijinja has no method that does). An
    encoder never changes the data it gets: it is its own."""
    if renderer.engine == "encoder":
        return renderer
    return MutableRenderer(renderer.source, name=renderer.name, limits=renderer.limits)
