"""docs/llamacpp.md is regenerated from docs/llamacpp_caps.json and chatcaps' current caps, without a server.

The JSON (llama-server's chat_template_caps per zoo template) comes from `python scripts/llamacpp_caps.py run`; when
chatcaps' caps change, `python scripts/llamacpp_caps.py` rewrites the doc and the reviewed causes may need updating.
"""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

import pytest
from paths import ROOT

from chatcaps.zoo import ZooTemplate


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llamacpp_caps", ROOT / "scripts" / "llamacpp_caps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(script: ModuleType) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(script.CAPS_JSON.read_text("utf-8"))
    return loaded


def test_the_json_holds_nine_booleans_per_zoo_file(
    data: dict[str, Any], script: ModuleType, zoo: tuple[ZooTemplate, ...]
) -> None:
    files = {template.file for template in zoo}
    assert set(data["caps"]) | set(data["not_loaded"]) == files
    for keys in data["caps"].values():
        assert set(keys) == set(script.KEYS)
        assert all(isinstance(value, bool) for value in keys.values())


def test_the_doc_is_current(data: dict[str, Any], script: ModuleType, zoo: tuple[ZooTemplate, ...]) -> None:
    assert script.DOC.read_text("utf-8") == script.build(data), "run: python scripts/llamacpp_caps.py"


def test_every_disagreement_has_a_reviewed_cause_and_every_cause_a_disagreement(
    data: dict[str, Any], script: ModuleType, zoo: tuple[ZooTemplate, ...]
) -> None:
    reasons = json.loads(script.REASONS_JSON.read_text("utf-8"))
    explained = script.causes(reasons)
    rows = script.disagreements(data["caps"], script.chatcaps_caps(sorted(data["caps"])))
    assert [row for row in rows if script.cause_of(row, explained) is None] == []
    used = {target for target in explained for row in rows if target in (row[0], f"{row[0]}:{row[1]}")}
    assert set(explained) - used == set()


def test_the_error_line_skips_template_source(script: ModuleType) -> None:
    log = (
        "0.00.010.718 E common_chat_verify_template: failed to apply template: Automatic parser generation failed: \n"
        "------------\n"
        "Error: Jinja Exception: Expected a system message\n"
        "error: the supplied chat template is not supported: {%- set x = 1 -%}\n"
    )
    assert script._error_line(log) == (
        "common_chat_verify_template: failed to apply template: Automatic parser generation failed: "
        "Error: Jinja Exception: Expected a system message"
    )
