"""A real browser for the page tests: Debian's Chromium (scripts/setup.sh installs it) driven by Playwright.

`page` is a fresh tab at 1280x800; `screenshot` saves what a test sees, into docs/img when CHATCAPS_SCREENSHOTS=1
(how the README's pictures are refreshed), else into the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from paths import ROOT
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = os.environ.get("CHATCAPS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Headless, and quiet on a closed network: no background connections, no component updates, no QUIC.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
SCREENSHOTS = ROOT / "docs" / "img"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium per test module: Playwright's sync API keeps an event loop running in this thread while it is
    open, so a later module's `asyncio.run` (tests/serve/test_http.py) would fail under a session-wide browser."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: `bash scripts/setup.sh --test` installs Debian's (needs apt)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


@pytest.fixture
def screenshot(tmp_path: Path) -> Callable[[Page, str], Path]:
    """Save the page as NAME.png and return where it went."""
    folder = SCREENSHOTS if os.environ.get("CHATCAPS_SCREENSHOTS") == "1" else tmp_path

    def take(page: Page, name: str) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=False)
        return path

    return take
