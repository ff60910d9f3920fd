"""The pages' shared stylesheet follows the system's light or dark setting."""

from __future__ import annotations

from typing import Literal

import pytest
from playwright.sync_api import Page

from chatcaps.web import static


@pytest.mark.parametrize(("scheme", "background"), [("light", "rgb(255, 255, 255)"), ("dark", "rgb(13, 17, 23)")])
def test_base_style_follows_the_system_color_scheme(
    page: Page, scheme: Literal["light", "dark"], background: str
) -> None:
    page.emulate_media(color_scheme=scheme)
    page.set_content(f"<style>{static('base.css')}</style><p>chatcaps</p>")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == background
