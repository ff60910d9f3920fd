"""minijinja with `Limits(isolate=True)`: renders in a capped worker process give what in-process renders give, and a
runaway template ends in a `RenderLimitError` while the test process (the caller) lives on.

The exhaustion cases run isolated too (test_exhaustion.py, setup "minijinja-isolated"); these tests check the
machinery: equality with in-process rendering over the zoo, the memory and time bounds, a worker's death and
replacement, its template cache, and many threads at once."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

from chatcaps import ChatTemplate, Limits, RenderLimitError, detect_caps
from chatcaps.engines import DEFAULT_LIMITS, compile_template
from chatcaps.engines.base import CAN_ISOLATE
from chatcaps.engines.builtins import pinned_clock
from chatcaps.engines.isolation import POOL, START_S
from chatcaps.errors import InputError, TemplateRenderError, TemplateSyntaxError
from chatcaps.zoo import ZooTemplate

from .test_threads import conversation, outcome

ISOLATED = Limits(isolate=True)
LOCAL = Limits(isolate=False)
SMALL_MEMORY = Limits(isolate=True, max_memory_bytes=256 * 1024**2)
DOUBLING = "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
JOINED = "{{ (['x' * 1000000] * 100000)|join|length }}"
"""100 GB built by one Rust join that charges no fuel first: only the worker's address-space cap stops it."""
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
COUNTING = "{% for m in messages %}[{{ loop.index }}:{{ m.content }}]{% endfor %}"


def test_every_zoo_template_detects_and_renders_as_in_process(zoo: tuple[ZooTemplate, ...]) -> None:
    differences = []
    for item in zoo:
        tokens = {"bos_token": item.bos_token, "eos_token": item.eos_token}
        pair = [ChatTemplate(item.read(), **tokens, engine="minijinja", limits=each) for each in (LOCAL, ISOLATED)]
        if pair[0].caps != pair[1].caps:
            differences.append(f"{item.file}: caps")
        for number in (0, 3, 5):
            if outcome(pair[0], conversation(number)) != outcome(pair[1], conversation(number)):
                differences.append(f"{item.file}: conversation {number}")
    assert differences == []


def test_a_doubling_string_runs_out_of_the_fuel_its_memory_budget_sets() -> None:
    with pytest.raises(RenderLimitError) as raised:
        compile_template(DOUBLING, engine="minijinja", limits=SMALL_MEMORY).render({})
    assert raised.value.limit == "max_memory_bytes"
    assert raised.value.message == "render ran out of fuel (4,194,304 fuel, set by max_memory_bytes=268435456)"


def test_an_allocation_past_the_memory_budget_kills_the_worker_and_the_caller_lives_on() -> None:
    with pytest.raises(RenderLimitError) as raised:
        compile_template(JOINED, engine="minijinja", limits=SMALL_MEMORY).render({})
    assert raised.value.limit == "max_memory_bytes"
    assert "memory allocation of" in str(raised.value)
    after = compile_template(COUNTING, engine="minijinja", limits=SMALL_MEMORY)
    assert after.render({"messages": [{"content": "a"}, {"content": "b"}]}) == "[1:a][2:b]"


def test_a_render_past_time_s_is_killed_when_fuel_does_not_stop_it() -> None:
    endless = Limits(isolate=True, time_s=0.2, minijinja_fuel_per_s=10**12, max_memory_bytes=None)  # fuel for hours
    renderer = compile_template(NESTED_LOOPS, engine="minijinja", limits=endless)
    with pytest.raises(RenderLimitError) as raised:
        renderer.render({})
    assert raised.value.limit == "time_s"
    assert "worker was killed" in str(raised.value)


def test_errors_come_back_typed_and_as_in_process() -> None:
    raising = "{{ raise_exception('no system role, ' ~ messages[0].role) }}"
    errors = []
    for limits in (LOCAL, ISOLATED):
        with pytest.raises(TemplateRenderError) as raised:
            compile_template(raising, engine="minijinja", limits=limits).render({"messages": [{"role": "system"}]})
        errors.append((type(raised.value), str(raised.value)))
    assert errors[0] == errors[1] == (TemplateRenderError, "no system role, system")
    with pytest.raises(TemplateSyntaxError):  # compiled in the caller first: no worker needed to find it
        compile_template("{% for %}", engine="minijinja", limits=ISOLATED)
    with pytest.raises(RenderLimitError) as limit:
        compile_template("{{ range(10000000)|length }}", engine="minijinja", limits=ISOLATED).render({})
    assert limit.value.limit == "max_range"


def test_a_worker_that_evicted_a_template_is_sent_it_again() -> None:
    POOL.close()  # no idle workers: the renders below, one after another, all go to the one worker they start
    renderers = [compile_template(f"{{{{ {number} }}}}", engine="minijinja", limits=ISOLATED) for number in range(70)]
    assert [renderer.render({}) for renderer in renderers] == [str(number) for number in range(70)]
    assert renderers[0].render({}) == "0"  # one worker served all 70; it keeps 64, so the first was sent again


def test_many_threads_render_through_their_own_workers() -> None:
    template = ChatTemplate(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "<{{ m.role }}>{{ m.content }}{% endfor %}{{ ns.n }}",
        engine="minijinja",
        limits=ISOLATED,
    )
    requests = [conversation(number) for number in range(24)]
    alone = [outcome(template, request) for request in requests]
    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(lambda request: outcome(template, request), requests * 4))
    assert together == alone * 4


def test_detect_caps_isolated_equals_in_process() -> None:
    source = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if enable_thinking %}<t>{% endif %}"
    assert detect_caps(source, engine="minijinja", limits=ISOLATED) == detect_caps(source, engine="minijinja")


def test_a_new_workers_start_is_not_charged_to_the_render_nor_left_unbounded() -> None:
    """The worker says when it is ready; the render's `time_s` starts then (it used to get 30 s more on a new one)."""
    POOL.close()
    assert compile_template("{{ 1 }}", engine="minijinja", limits=Limits(time_s=0.01)).render({}) == "1"
    POOL.close()
    endless = Limits(time_s=0.2, minijinja_fuel_per_s=10**12, max_memory_bytes=None)
    renderer = compile_template(NESTED_LOOPS, engine="minijinja", limits=endless)
    started = time.perf_counter()
    with pytest.raises(RenderLimitError) as raised:
        renderer.render({})
    assert raised.value.limit == "time_s"
    assert time.perf_counter() - started < START_S / 2


def test_the_callers_pinned_clock_reaches_the_worker() -> None:
    renderer = compile_template("{{ strftime_now('%Y-%m-%d') }}", engine="minijinja", limits=ISOLATED)
    with pinned_clock(datetime(2001, 2, 3)):
        assert renderer.render({}) == "2001-02-03"


def test_python_objects_are_refused_isolated_and_reach_an_in_process_render() -> None:
    with pytest.raises(InputError, match=r"^an isolated render takes plain data \(it is sent to a worker process\)"):
        compile_template("{{ f() }}", engine="minijinja", limits=ISOLATED).render({"f": lambda: 1})
    assert compile_template("{{ f() }}", engine="minijinja", limits=LOCAL).render({"f": lambda: 1}) == "1"


def test_minijinja_renders_isolated_by_default_where_it_can() -> None:
    assert DEFAULT_LIMITS.isolate is CAN_ISOLATE is True
    with pytest.raises(InputError, match="an isolated render takes plain data"):
        compile_template("{{ f() }}", engine="minijinja").render({"f": lambda: 1})
