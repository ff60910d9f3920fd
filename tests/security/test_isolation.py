"""minijinja with `Limits(isolate=True)`: renders in a capped worker process give what in-process renders give, and a
runaway template ends in a `RenderLimitError` while the test process (the caller) lives on.

The exhaustion cases run isolated too (test_exhaustion.py, setup "minijinja-isolated"); these tests check the
machinery: equality with in-process rendering over the zoo, the memory and time bounds, a worker's death and
replacement, its template cache, and many threads at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from chatcaps import ChatTemplate, Limits, RenderLimitError, detect_caps
from chatcaps.engines import compile_template
from chatcaps.engines.isolation import POOL
from chatcaps.errors import TemplateRenderError, TemplateSyntaxError
from chatcaps.zoo import ZooTemplate

from .test_threads import conversation, outcome

ISOLATED = Limits(isolate=True)
SMALL_MEMORY = Limits(isolate=True, max_memory_bytes=256 * 1024**2)
DOUBLING = "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
COUNTING = "{% for m in messages %}[{{ loop.index }}:{{ m.content }}]{% endfor %}"


def test_every_zoo_template_detects_and_renders_as_in_process(zoo: tuple[ZooTemplate, ...]) -> None:
    differences = []
    for item in zoo:
        tokens = {"bos_token": item.bos_token, "eos_token": item.eos_token}
        pair = [ChatTemplate(item.read(), **tokens, engine="minijinja", limits=each) for each in (Limits(), ISOLATED)]
        if pair[0].caps != pair[1].caps:
            differences.append(f"{item.file}: caps")
        for number in (0, 3, 5):
            if outcome(pair[0], conversation(number)) != outcome(pair[1], conversation(number)):
                differences.append(f"{item.file}: conversation {number}")
    assert differences == []


def test_a_doubling_string_stops_at_the_memory_budget_and_the_caller_lives_on() -> None:
    with pytest.raises(RenderLimitError) as raised:
        compile_template(DOUBLING, engine="minijinja", limits=SMALL_MEMORY).render({})
    assert raised.value.limit == "max_memory_bytes"
    assert "memory allocation of" in str(raised.value)
    after = compile_template(COUNTING, engine="minijinja", limits=SMALL_MEMORY)
    assert after.render({"messages": [{"content": "a"}, {"content": "b"}]}) == "[1:a][2:b]"


def test_a_render_past_time_s_is_killed_when_fuel_does_not_stop_it() -> None:
    endless = Limits(isolate=True, time_s=0.2, minijinja_fuel_per_s=10**12)  # fuel that lasts for hours
    renderer = compile_template(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        engine="minijinja",
        limits=endless,
    )
    with pytest.raises(RenderLimitError) as raised:
        renderer.render({})
    assert raised.value.limit == "time_s"
    assert "worker was killed" in str(raised.value)


def test_errors_come_back_typed_and_as_in_process() -> None:
    raising = "{{ raise_exception('no system role, ' ~ messages[0].role) }}"
    errors = []
    for limits in (Limits(), ISOLATED):
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
