"""The playground in a real browser, against a real `chatcaps playground` on loopback: a pasted template renders a
tool conversation with its special tokens and generation prompt marked, a pasted reply's tool call is read back, a
hostile template's error shows within the time limit and the page stays usable, Ctrl+Enter renders, and the layout
stacks in a narrow window. The screenshot docs/img/playground.png is taken here (CHATCAPS_SCREENSHOTS=1)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from llama_server_harness import free_port
from paths import DATA, ROOT
from playwright.sync_api import Page, expect

from chatcaps import Limits

FOLDER = DATA / "playground"
TEMPLATE = (FOLDER / "tools.jinja").read_text(encoding="utf-8")
CALL_REPLY = (
    '<tool_call>{"name": "zq7_get_weather", "arguments": {"city": "Madrid", "unit": "celsius"}}</tool_call><|im_end|>'
)
"""A call of the tool in the page's default conversation (chatcaps' tool_call_object_arguments context)."""
ENDLESS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
WAIT_MS = int((Limits().time_s + 6) * 1000)
"""How long the page may take to show a hostile template's error: the time limit, and a slow machine's margin."""


@pytest.fixture(scope="module")
def playground() -> Iterator[str]:
    """`chatcaps playground` serving tests/data/playground/tools.jinja (eos `<|im_end|>`) and reading that folder."""
    port = free_port()
    command = [sys.executable, "-m", "chatcaps.cli", "playground", str(FOLDER / "tools.jinja"), "--eos", "<|im_end|>"]
    command += ["--port", str(port), "--playground-dir", str(FOLDER)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert server.stdout is not None
        assert server.stdout.readline() == f"chatcaps playground: http://127.0.0.1:{port}/\n"
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}playground/templates", timeout=5).raise_for_status()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "chatcaps playground did not start"
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(30)


def _paste(page: Page, template: str) -> None:
    page.get_by_label("Pasted template (jinja)").fill(template)
    page.get_by_label("eos_token").fill("<|im_end|>")
    page.get_by_label("More special tokens to mark", exact=False).fill("<|im_start|>")


def _render(page: Page) -> None:
    page.get_by_role("button", name="Render").click()


def test_a_pasted_template_renders_the_tool_conversation_and_reads_a_tool_call(page: Page, playground: str) -> None:
    page.goto(playground)
    expect(page.locator("#status")).to_contain_text("done")  # the served template, rendered on load
    _paste(page, TEMPLATE)
    expect(page.get_by_role("radio", name="pasted")).to_be_checked()
    _render(page)
    expect(page.locator("#template-about")).to_contain_text("<pasted>")
    prompt = page.locator("#prompt")
    expect(prompt).to_contain_text("<|im_start|>user\nHow warm is it in Madrid? Zq7User1<|im_end|>")
    specials = prompt.locator(".special").all_inner_texts()
    assert set(specials) == {"<|im_start|>", "<|im_end|>"} and len(specials) == 9  # five turns opened, four closed
    assert "".join(prompt.locator(".gen").all_inner_texts()) == "<|im_start|>assistant\n"
    expect(prompt.locator(".gen-start")).to_have_text("<|im_start|>")
    expect(page.locator("#report")).to_contain_text("default → nothing (default: template default)")

    page.get_by_label("Paste what the model generated").fill(CALL_REPLY)
    page.get_by_role("button", name="Read reply").click()
    calls = page.locator("#tool-calls")
    expect(calls).to_be_visible()
    cells = calls.locator("tbody td").all_inner_texts()
    assert cells == ["call_0", "zq7_get_weather", '{"city": "Madrid", "unit": "celsius"}']
    expect(page.locator("#parsed")).to_contain_text("tool_calls")
    expect(page.locator("#stream li").last).to_contain_text("close")


def test_a_hostile_template_shows_an_error_in_time_and_the_page_stays_usable(page: Page, playground: str) -> None:
    page.goto(playground)
    expect(page.locator("#status")).to_contain_text("done")
    _paste(page, ENDLESS)
    started = time.monotonic()
    _render(page)
    errors = page.get_by_role("alert")
    expect(errors).to_contain_text("render ran past time_s=2.0", timeout=WAIT_MS)
    assert time.monotonic() - started < WAIT_MS / 1000
    _paste(page, TEMPLATE)
    page.get_by_label("Messages (JSON)").press("Control+Enter")  # the keyboard renders too
    expect(page.locator("#errors")).to_be_empty()
    expect(page.locator("#template-about")).to_contain_text("<pasted>")
    expect(page.locator("#prompt")).to_contain_text("How warm is it in Madrid?")


def test_a_template_error_shows_its_line_and_span(page: Page, playground: str) -> None:
    page.goto(playground)
    _paste(page, "{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    page.keyboard.press("Control+Enter")
    errors = page.get_by_role("alert")
    expect(errors).to_contain_text("unexpected '}'")
    expect(errors.locator("pre")).to_have_text("line 2 | {{ m.content }")
    expect(errors.locator("mark")).to_have_text("}")


def test_every_control_is_labelled_and_tab_then_enter_renders(page: Page, playground: str) -> None:
    page.goto(playground)
    expect(page.locator("#status")).to_contain_text("done")
    controls = "[...document.querySelectorAll('input, select, textarea')]"
    assert page.evaluate(f"{controls}.filter((control) => !control.labels.length).map((control) => control.id)") == []
    messages = page.get_by_label("Messages (JSON)")
    messages.fill('[{"role": "user", "content": "Typed by keyboard"}]')
    reached: list[str] = []
    while page.evaluate("document.activeElement.id") != "render" and len(reached) < 10:
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.id"))
    assert reached == ["tools", "intent", "budget", "kwargs", "generation-prompt", "continue-final", "render"]
    page.keyboard.press("Enter")
    expect(page.locator("#prompt")).to_contain_text("<|im_start|>user\nTyped by keyboard<|im_end|>")


def test_the_layout_stacks_in_a_narrow_window(page: Page, playground: str) -> None:
    page.set_viewport_size({"width": 600, "height": 900})
    page.goto(playground)
    expect(page.locator("#status")).to_contain_text("done")
    inputs, outputs = page.locator("#request").bounding_box(), page.locator("#outputs").bounding_box()
    assert inputs is not None and outputs is not None
    assert outputs["y"] >= inputs["y"] + inputs["height"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 600


def test_screenshot(page: Page, playground: str, screenshot: Callable[[Page, str], Path]) -> None:
    """The served template, its tool conversation rendered and a tool call read back, at 1280x800."""
    page.goto(playground)
    expect(page.locator("#status")).to_contain_text("done")
    page.get_by_label("More special tokens to mark", exact=False).fill("<|im_start|>")
    page.get_by_label("Paste what the model generated").fill(CALL_REPLY)
    page.keyboard.press("Control+Enter")
    expect(page.locator("#tool-calls")).to_be_visible()
    page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
    assert screenshot(page, "playground").is_file()
