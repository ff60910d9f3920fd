"""Detection stops at the first hostile sign: a probe render that hits a sandbox limit ends `detect_caps` (and so
`ChatTemplate.caps` and `.render`) with that `RenderLimitError`, naming the probe, within `time_s` + 0.5 s of the call
(compile included); a detection cut short is cached nowhere. A probe the template merely fails stays a result.

The hostile templates are detection.json's, each in the three setups of tests/security (scripts/security_report.py
measures them with the default `Limits` for docs/security.md).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chatcaps import ChatTemplate, Limits, RenderLimitError, detect_caps
from chatcaps.engines import ENGINE_NAMES, EngineName, compile_template

from .harness import HERE, SETUPS, configure, expected

DETECTION: list[dict[str, Any]] = json.loads((HERE / "detection.json").read_text(encoding="utf-8"))
TIME_S = 0.5
BOUND_S = TIME_S + 0.5
MEMORY_TIME_S = 2.0
"""What a hostile template may cost through `ChatTemplate(...).render`: one probe render that hits `time_s`."""
USER = [{"role": "user", "content": "Hi"}]
CASES = [(case, setup) for case in DETECTION for setup in SETUPS]


@pytest.mark.parametrize(("case", "setup"), CASES, ids=[f"{case['name']}-{setup}" for case, setup in CASES])
def test_render_of_a_hostile_template_stops_at_the_first_limit(case: dict[str, Any], setup: str) -> None:
    """Isolated, a worker is started before the clock, as a server's pool is warm (a cold one adds 0.2-0.4 s)."""
    engine, limits = configure(setup)
    limits = replace(limits, time_s=TIME_S)
    if limits.isolate:
        assert compile_template("{{ 1 }}", engine=engine, limits=limits).render({}) == "1"
    started = time.perf_counter()
    with pytest.raises(RenderLimitError) as raised:
        ChatTemplate(case["template"], engine=engine, limits=limits).render(USER)
    elapsed = time.perf_counter() - started
    assert raised.value.limit in expected(case, setup), raised.value
    assert str(raised.value).endswith("(probe 'generation_prompt'; detection stops at the first limit)")
    assert elapsed <= BOUND_S, f"{elapsed:.2f} s"


@pytest.mark.parametrize("setup", SETUPS)
def test_a_probe_that_runs_out_of_memory_stops_detection(setup: str) -> None:
    """The first probe stops: on jinja2 by the watchdog's memory sample; on minijinja by fuel, which
    `max_memory_bytes` sets here (fuel that would last hours by time: 64 bytes of data per fuel), or isolated by the
    worker's address-space cap, whichever comes first."""
    engine, limits = configure(setup)
    # time_s well above the 0.2-0.4 s the isolated worker takes to reach its cap on a quiet 2-core machine (it took
    # past time_s = 0.5 s + grace once in a CI run): the test is about which limit stops detection, not how soon.
    limits = replace(limits, time_s=MEMORY_TIME_S, max_memory_bytes=256 * 1024**2, minijinja_fuel_per_s=10**12)
    growing = (
        "{% set big = 'x' * 8000000 %}{% set ns = namespace(l=[]) %}"
        "{% for i in range(100000) %}{% set ns.l = ns.l + [big ~ i] %}{% endfor %}{{ messages[0].content }}"
    )
    started = time.perf_counter()
    with pytest.raises(RenderLimitError) as raised:
        detect_caps(growing, engine=engine, limits=limits)
    assert raised.value.limit == "max_memory_bytes", raised.value
    assert time.perf_counter() - started <= MEMORY_TIME_S + 0.5


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_detection_cut_short_is_cached_nowhere(
    engine: EngineName, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATCAPS_CACHE_DIR", str(tmp_path))
    template = ChatTemplate(DETECTION[0]["template"], engine=engine, limits=Limits(time_s=0.2))
    for _ in range(2):  # the second call raises too: no Caps were kept in memory
        with pytest.raises(RenderLimitError) as raised:
            template.caps  # noqa: B018 - the property detects
        assert raised.value.limit == "time_s"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_detection_that_spends_detect_time_s_stops_with_that_limit(engine: EngineName) -> None:
    """Every render well within `time_s` (a few ms), but the ~60 of them together past the detection's budget."""
    slow = "{% for i in range(1000) %}{% for j in range(100) %}{% endfor %}{% endfor %}{{ messages[0].content }}"
    with pytest.raises(RenderLimitError) as raised:
        detect_caps(slow, engine=engine, limits=Limits(detect_time_s=0.02))
    assert raised.value.limit == "detect_time_s"
    assert str(raised.value).startswith("detection ran past detect_time_s=0.02 before probe ")


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_probe_the_template_fails_is_still_a_result(engine: EngineName) -> None:
    refusing = "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}{{ messages[0].content }}"
    caps = detect_caps(refusing, engine=engine)
    assert {error.error for error in caps.probe_errors} == {"no tools here"}
    assert caps.tools.definitions is False
