"""Caps over the whole zoo: a reviewed snapshot per template, jinja2/minijinja agreement, docs/zoo.md current."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from paths import DATA, ROOT
from syrupy.assertion import SnapshotAssertion

from chatcaps import Caps, detect_caps
from chatcaps.zoo import ZooTemplate

AGREEMENT = json.loads((DATA / "caps_engine_agreement.json").read_text("utf-8"))


def test_caps_snapshot(zoo_template: ZooTemplate, snapshot: SnapshotAssertion) -> None:
    caps = detect_caps(zoo_template.read())
    assert Caps.from_json(caps.to_json()) == caps
    assert caps.to_dict() == snapshot


def _comparable(caps: Caps) -> dict[str, Any]:
    data = caps.to_dict()
    del data["engine"], data["probe_errors"]
    return data


def test_engines_agree_where_both_render(zoo: tuple[ZooTemplate, ...]) -> None:
    """Same Caps from both engines wherever the same probes render on both; the rest are the measured engine
    differences of docs/engines.md (minijinja iterates None, `map | tojson`, float literals, Markup arithmetic),
    pinned by name."""
    differing, unexplained = [], []
    for template in zoo:
        jinja2_caps = detect_caps(template.read(), engine="jinja2")
        minijinja_caps = detect_caps(template.read(), engine="minijinja")
        if _comparable(jinja2_caps) == _comparable(minijinja_caps):
            continue
        differing.append(template.file)
        failed = [{error.probe for error in caps.probe_errors} for caps in (jinja2_caps, minijinja_caps)]
        if failed[0] == failed[1] and template.file not in AGREEMENT["differ_where_renders_differ"]:
            unexplained.append(template.file)
    assert unexplained == []
    expected = AGREEMENT["differ_where_probes_fail_differently"] + sorted(AGREEMENT["differ_where_renders_differ"])
    assert sorted(differing) == sorted(expected)


def test_zoo_doc_is_current(zoo: tuple[ZooTemplate, ...]) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "zoo_doc.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
