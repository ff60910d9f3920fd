"""Canonical test conversations (`contexts/*.json`): the inputs every template is rendered with in tests and tools.

The schema is documented in contexts/README.md. This module only reads the files; it never decides what they mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

CONTEXTS_DIR = Path(__file__).resolve().parents[2] / "contexts"


@dataclass(frozen=True)
class Context:
    """One conversation and how to render it."""

    name: str
    description: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    reasoning: str | int | None = None
    template_args: dict[str, Any] = field(default_factory=dict)
    test_metadata: dict[str, Any] = field(default_factory=dict)


def load_context(path: Path) -> Context:
    data = orjson.loads(path.read_bytes())
    tools = data.get("tools")
    return Context(
        name=path.stem,
        description=data.get("description", ""),
        messages=tuple(data["messages"]),
        tools=None if tools is None else tuple(tools),
        add_generation_prompt=data.get("add_generation_prompt", True),
        continue_final_message=data.get("continue_final_message", False),
        reasoning=data.get("reasoning"),
        template_args=data.get("template_args", {}),
        test_metadata=data.get("_test_metadata", {}),
    )


def load_contexts(folder: Path = CONTEXTS_DIR) -> tuple[Context, ...]:
    """Every context in `folder`, sorted by name."""
    return tuple(load_context(path) for path in sorted(folder.glob("*.json")))
