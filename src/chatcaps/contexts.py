"""Canonical test conversations (`contexts/*.json`): the inputs every template is rendered with in tests and tools.

The schema is documented in contexts/README.md. This module only reads the files; it never decides what they mean.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def condition_holds(caps: Mapping[str, Any], condition: str) -> bool:
    """Whether Caps (as `Caps.to_dict()`) satisfy a `_test_metadata` condition (grammar in contexts/README.md)."""
    return all(_term_holds(caps, term) for term in condition.split("&"))


def _term_holds(caps: Mapping[str, Any], term: str) -> bool:
    for operator in ("!=", "=", ":"):
        if operator in term:
            path, expected = term.split(operator, 1)
            value = _field(caps, path)
            if operator == ":":
                return isinstance(value, list | tuple) and expected in value
            text = value if isinstance(value, str) else orjson.dumps(value).decode()
            return (text == expected) != (operator == "!=")
    return bool(_field(caps, term))


def _field(caps: Mapping[str, Any], path: str) -> Any:
    value: Any = caps
    for key in path.split("."):
        value = value[key]
    return value


def metadata_failures(prompt: str, caps: Mapping[str, Any], metadata: Mapping[str, Any]) -> list[str]:
    """Every way `prompt` breaks a context's `_test_metadata` for a template with these Caps; empty when it holds."""
    failures = [f"missing {text!r}" for text in metadata.get("must_contain", ()) if text not in prompt]
    for condition, texts in metadata.get("must_contain_if", {}).items():
        if condition_holds(caps, condition):
            failures += [f"missing {text!r} (as {condition})" for text in texts if text not in prompt]
    failures += [f"shows {text!r}" for text in metadata.get("must_not_contain", ()) if text in prompt]
    for condition, texts in metadata.get("must_not_contain_if", {}).items():
        if condition_holds(caps, condition):
            failures += [f"shows {text!r} (as {condition})" for text in texts if text in prompt]
    return failures
