"""Canonical test conversations (`*.json` beside this file): the inputs every template is rendered with in tests and
tools, shipped as package data so that `chatcaps diff` has them wherever chatcaps is installed.

The schema is documented in README.md beside them. This module only reads the files; it never decides what they mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import orjson

CONTEXTS: Traversable = resources.files(__name__)
"""The folder of contexts shipped with chatcaps (a `Path` when installed as files)."""


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


def load_context(path: Traversable) -> Context:
    data = orjson.loads(path.read_bytes())
    tools = data.get("tools")
    return Context(
        name=Path(path.name).stem,
        description=data.get("description", ""),
        messages=tuple(data["messages"]),
        tools=None if tools is None else tuple(tools),
        add_generation_prompt=data.get("add_generation_prompt", True),
        continue_final_message=data.get("continue_final_message", False),
        reasoning=data.get("reasoning"),
        template_args=data.get("template_args", {}),
        test_metadata=data.get("_test_metadata", {}),
    )


def load_contexts(folder: Traversable = CONTEXTS) -> tuple[Context, ...]:
    """Every `*.json` context in `folder` (none when it is not a folder), sorted by name."""
    entries = sorted(folder.iterdir(), key=lambda entry: entry.name) if folder.is_dir() else []
    return tuple(load_context(entry) for entry in entries if entry.name.endswith(".json") and entry.is_file())


def condition_holds(caps: Mapping[str, Any], condition: str) -> bool:
    """Whether Caps (as `Caps.to_dict()`) satisfy a `_test_metadata` condition (grammar in README.md beside this)."""
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
