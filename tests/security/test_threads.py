"""No cross-request leakage: one `ChatTemplate` per engine renders different conversations from many threads at once,
and every result equals the one rendered alone. The templates keep state in `namespace()` (and macros, whose depth
the jinja2 sandbox counts per thread); a render that times out in one thread disturbs none of the others."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from chatcaps import ChatcapsError, ChatTemplate, Limits, RenderLimitError
from chatcaps.engines import ENGINE_NAMES, EngineName, compile_template
from chatcaps.zoo import ZooTemplate

TEMPLATES = (
    "llamacpp__openai-gpt-oss-120b.jinja",  # five namespace() objects and eight macros
    "llamacpp__Qwen-Qwen3-0.6B.jinja",  # namespace() state across the message loop
    "deepseek-ai__DeepSeek-R1-0528__671B.jinja",  # namespace() flags for tool calls
)
THREADS = 16
ROUNDS = 6
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads every 10 us instead of every 5 ms, so renders interleave mid-template."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def conversation(number: int) -> dict[str, Any]:
    """A conversation that differs from every other in text, length, tool use and reasoning."""
    messages: list[dict[str, Any]] = []
    if number % 2:
        messages.append({"role": "system", "content": f"System prompt {number}."})
    for turn in range(number % 4 + 1):
        messages.append({"role": "user", "content": f"Question {number}.{turn}?"})
        if number % 3 == 0 and turn == 0:
            call_id = f"call{number:05d}"
            call = {"name": "get_weather", "arguments": {"city": f"City {number}"}}
            messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "function": call}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": f"{number} degrees"})
        messages.append(
            {"role": "assistant", "content": f"Answer {number}.{turn}.", "reasoning_content": f"Thinking {number}"}
        )
    messages.append({"role": "user", "content": f"Last question {number}"})
    reasoning = [None, "off", "high", 512][number % 4]
    return {"messages": messages, "tools": TOOLS if number % 3 == 0 else None, "reasoning": reasoning}


def outcome(template: ChatTemplate, request: dict[str, Any]) -> Any:
    """The render's full result, or the chatcaps error it raised (some templates refuse some of these requests)."""
    try:
        return template.render(**request).to_dict()
    except ChatcapsError as error:
        return f"{type(error).__name__}: {error}"


@pytest.fixture(scope="module")
def chosen(zoo: tuple[ZooTemplate, ...]) -> list[ZooTemplate]:
    by_file = {item.file: item for item in zoo}
    return [by_file[name] for name in TEMPLATES]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_concurrent_renders_equal_the_single_threaded_ones(engine: EngineName, chosen: list[ZooTemplate]) -> None:
    for item in chosen:
        assert "namespace(" in item.read()
        template = ChatTemplate(item.read(), bos_token=item.bos_token, eos_token=item.eos_token, engine=engine)
        requests = [conversation(number) for number in range(24)]
        alone = [outcome(template, request) for request in requests]
        assert sum(isinstance(result, dict) for result in alone) >= 12, alone
        jobs = [(template, requests[number]) for number in range(len(requests)) for _ in range(ROUNDS)]
        random.Random(7).shuffle(jobs)
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            together = list(pool.map(outcome, *zip(*jobs, strict=True)))
        expected = {id(request): result for request, result in zip(requests, alone, strict=True)}
        mismatched = [
            request for (_, request), result in zip(jobs, together, strict=True) if result != expected[id(request)]
        ]
        assert mismatched == [], f"{item.file}: {len(mismatched)} of {len(jobs)} renders differ"


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_namespace_and_macro_state_stay_inside_each_render(engine: EngineName) -> None:
    """A renderer shared by threads: each render counts from its own namespace and nests its own macros."""
    renderer = compile_template(
        "{% set ns = namespace(total=0) %}{% macro deep(n) %}{% if n %}{{ deep(n - 1) }}{% else %}.{% endif %}"
        "{% endmacro %}{% for m in messages %}{% set ns.total = ns.total + m.n %}{{ deep(m.n) }}{% endfor %}"
        "={{ ns.total }}",
        engine=engine,
    )

    def render(number: int) -> str:
        return renderer.render({"messages": [{"n": number % 40} for _ in range(number % 5 + 1)]})

    expected = {number: render(number) for number in range(200)}
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        results = list(pool.map(render, list(range(200)) * 3))
    assert results == [expected[number] for number in list(range(200)) * 3]
    assert expected[42] == "." * 3 + "=6"


def test_a_render_that_times_out_leaves_the_other_threads_alone() -> None:
    slow = compile_template(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", limits=Limits(time_s=0.3)
    )
    fast = compile_template(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    )
    limits: list[str] = []
    results: list[str] = []
    lock = threading.Lock()

    def run_slow() -> None:
        try:
            slow.render({})
        except RenderLimitError as error:
            with lock:
                limits.append(error.limit)

    def run_fast(count: int) -> None:
        for _ in range(400):
            output = fast.render({"messages": [{}] * count})
            with lock:
                results.append(f"{count}:{output}")

    threads = [threading.Thread(target=run_slow) for _ in range(2)]
    threads += [threading.Thread(target=run_fast, args=(count,)) for count in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert limits == ["time_s", "time_s"]
    assert sorted(set(results)) == ["1:1", "2:2", "3:3", "4:4"]
    assert len(results) == 1600
