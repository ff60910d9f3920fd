"""detect_caps on one small template per mechanism (tests/data/probe_templates.json), on both engines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatcaps import TemplateSyntaxError, detect_caps
from chatcaps.engines import ENGINE_NAMES, EngineName

CASES: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "probe_templates.json").read_text("utf-8"))
CASES.pop("_doc")


def _at(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_mechanism(case: str, engine: EngineName) -> None:
    spec = CASES[case]
    caps = detect_caps(spec["template"], bos_token="<s>", engine=engine).to_dict()
    # minijinja's own error texts differ, and it iterates None without raising (docs/engines.md)
    expected = {
        path: value
        for path, value in spec["expect"].items()
        if engine == "jinja2" or not path.startswith("probe_errors")
    }
    assert {path: _at(caps, path) for path in expected} == expected


def test_syntax_error_raises_with_position() -> None:
    with pytest.raises(TemplateSyntaxError) as raised:
        detect_caps("{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    assert raised.value.line == 2
