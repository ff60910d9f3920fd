"""The zoo site in a real browser, opened from disk: filters count what Caps say, search and keyboard sorting work, a
template's page shows its call format, and both pages read at a narrow window. Built over every fifth zoo template
(skipped when there is no zoo), which keeps the run short."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from chatcaps import detect_caps
from chatcaps.caps import Caps
from chatcaps.matrix import call_format_line
from chatcaps.web.site import SiteTemplate, page_path, site_files
from chatcaps.zoo import ZooTemplate

Shot = Callable[[Page, str], Path]
NARROW = 480


@pytest.fixture(scope="module")
def shown(zoo: tuple[ZooTemplate, ...]) -> dict[str, tuple[SiteTemplate, Caps]]:
    templates = [SiteTemplate(t.file, t.read(), t.bos_token, t.eos_token) for t in zoo[::5]]
    return {
        template.name: (
            template,
            detect_caps(template.text, bos_token=template.bos_token, eos_token=template.eos_token),
        )
        for template in templates
    }


@pytest.fixture(scope="module")
def site(shown: dict[str, tuple[SiteTemplate, Caps]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    templates = [template for template, _ in shown.values()]
    caps = {name: found for name, (_, found) in shown.items()}
    files = site_files(templates, caps, {}, [], title=f"chatcaps zoo: {len(caps)} templates")
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text, encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def featured(shown: dict[str, tuple[SiteTemplate, Caps]]) -> str:
    """The template whose page is opened: the first with a tool-call format and a reasoning control."""
    return next(
        name for name, (_, caps) in shown.items() if caps.tools.call_format is not None and caps.reasoning.controls
    )


def _open(page: Page, site: Path, path: str = "index.html") -> None:
    page.emulate_media(color_scheme="light")
    page.goto((site / path).as_uri())


def _names(page: Page) -> list[str]:
    names: list[str] = page.locator("#matrix tbody tr:not([hidden])").evaluate_all(
        "rows => rows.map(row => row.dataset.name)"
    )
    return names


def test_filtering_to_tool_calls_counts_the_caps_with_tool_calls(
    page: Page, site: Path, shown: dict[str, tuple[SiteTemplate, Caps]], screenshot: Shot
) -> None:
    _open(page, site)
    total = len(shown)
    expect(page.locator("#count")).to_have_text(f"{total} of {total} templates")
    page.select_option('select[data-facet="calls"]', "yes")
    with_calls = sorted(name for name, (_, caps) in shown.items() if caps.tools.calls)
    expect(page.locator("#count")).to_have_text(f"{len(with_calls)} of {total} templates")
    assert _names(page) == with_calls
    screenshot(page, "site-matrix")
    page.click('button[type="reset"]')
    expect(page.locator("#count")).to_have_text(f"{total} of {total} templates")


def test_search_by_name(page: Page, site: Path, shown: dict[str, tuple[SiteTemplate, Caps]], featured: str) -> None:
    _open(page, site)
    query = featured.split("__")[0].upper()  # the organisation's name, in other letters' case
    page.fill("#search", query)
    expected = sorted(name for name in shown if query.lower() in name.lower())
    expect(page.locator("#count")).to_have_text(f"{len(expected)} of {len(shown)} templates")
    assert _names(page) == expected


def test_a_column_sorts_by_keyboard(page: Page, site: Path) -> None:
    _open(page, site)
    header = page.locator("#matrix thead th", has_text="default state")
    column = int(header.get_attribute("data-column") or "")
    cells = f"#matrix tbody tr td:nth-child({column + 1})"
    header.focus()
    page.keyboard.press("Enter")
    ascending = page.locator(cells).all_inner_texts()
    assert (header.get_attribute("aria-sort"), ascending) == ("ascending", sorted(ascending))
    page.keyboard.press(" ")
    descending = page.locator(cells).all_inner_texts()
    assert (header.get_attribute("aria-sort"), descending) == ("descending", sorted(ascending, reverse=True))
    others = page.locator('#matrix thead th:not([aria-sort="none"])')
    assert others.count() == 1


def test_a_template_page_shows_its_call_format(
    page: Page, site: Path, shown: dict[str, tuple[SiteTemplate, Caps]], featured: str, screenshot: Shot
) -> None:
    _open(page, site)
    page.fill("#search", featured)
    page.click(f'#matrix a[href="{page_path(featured)}"]')
    assert page.inner_text("h1") == featured
    _, caps = shown[featured]
    assert page.inner_text("#call-format") == call_format_line(caps)
    screenshot(page, "site-template")


@pytest.mark.parametrize("path", ["index.html", "template"])
def test_pages_read_at_a_narrow_window(page: Page, site: Path, featured: str, path: str) -> None:
    page.set_viewport_size({"width": NARROW, "height": 800})
    _open(page, site, page_path(featured) if path == "template" else path)
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW
    if path == "index.html":  # the matrix scrolls in its own box
        assert page.evaluate("(box => box.scrollWidth > box.clientWidth)(document.querySelector('.matrix-scroller'))")
