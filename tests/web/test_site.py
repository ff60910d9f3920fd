"""The zoo site's pages as HTML (no browser): built from matrix.py's rows, every template value escaped, a failing
render shown as its error; over the three hand-written templates of tests/data/site."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from html.parser import HTMLParser

import pytest
from paths import DATA

from chatcaps import detect_caps
from chatcaps.caps import Caps
from chatcaps.matrix import MATRIX_COLUMNS, matrix_rows
from chatcaps.web.site import ASSETS, SiteTemplate, diff_segments, index_page, page_path, site_files, template_page

FOLDER = DATA / "site"
DISAGREEMENT = ("tools.jinja", "thinking", "yes", "default_state none")
HOSTILE_NAME = "<script>alert(1)</script>"
HOSTILE_TEXT = '{% for m in messages %}<script>alert("{{ m.content }}")</script>{% endfor %}'


@pytest.fixture(scope="module")
def templates() -> list[SiteTemplate]:
    return [SiteTemplate(path.name, path.read_text("utf-8")) for path in sorted(FOLDER.glob("*.jinja"))]


@pytest.fixture(scope="module")
def caps(templates: list[SiteTemplate]) -> dict[str, Caps]:
    return {template.name: detect_caps(template.text) for template in templates}


@pytest.fixture(scope="module")
def files(templates: list[SiteTemplate], caps: dict[str, Caps]) -> dict[str, str]:
    failed = {"broken.jinja": "TemplateSyntaxError: unexpected end of template"}
    return site_files(templates, caps, failed, [DISAGREEMENT], title="chatcaps zoo: 3 templates in site")


class _Cells(HTMLParser):
    """The text of each row of the table whose id is `matrix`, cell by cell."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_table = self._in_body = self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._in_table = ("id", "matrix") in attrs
        elif self._in_table and tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag in ("td", "th"):
            self._in_cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._in_cell = False
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.rows[-1][-1] += data


def test_the_sites_matrix_rows_are_matrix_rows(files: dict[str, str], caps: dict[str, Caps]) -> None:
    parser = _Cells()
    parser.feed(files["index.html"])
    assert [tuple(row) for row in parser.rows] == matrix_rows(caps)
    header = "".join(
        f'<th scope="col" class="col-{column.replace(" ", "-")}" tabindex="0" aria-sort="none" '
        f'data-column="{index}">{column}</th>\n'
        for index, column in enumerate(MATRIX_COLUMNS)
    )
    assert f"<thead><tr>\n{header}</tr></thead>" in files["index.html"]


def test_a_row_carries_its_cells_and_its_filter_values(files: dict[str, str]) -> None:
    assert (
        '<tr data-name="tools.jinja" data-f-calls="yes" data-f-definitions="yes" data-f-system="yes" data-f-typed="no" '
        'data-f-reasoning="none" data-f-state="none" data-f-switch="none" data-f-shape="object">\n'
        '<th scope="row"><a href="t/tools.jinja.html">tools.jinja</a></th><td>none</td><td>-</td><td>none</td>'
        "<td>none</td><td>-</td><td>definitions,calls,parallel_calls,responses (object)</td>"
        "<td>object / json: - + &lt;tool_call&gt;{&#34;name&#34;: &#34;${name}&#34;, &#34;arguments&#34;: "
        "${arguments}}&lt;/tool_call&gt; + - (sep -)</td><td>&lt;|im_end|&gt;</td><td>system,inline,developer</td>"
        "<td>string</td>\n</tr>"
    ) in files["index.html"]


def test_the_index_shows_the_count_the_filters_the_failures_and_the_disagreements(files: dict[str, str]) -> None:
    index = files["index.html"]
    assert '<p id="count" class="count" role="status" aria-live="polite">3 of 3 templates</p>' in index
    assert (
        '<label>tool calls <select data-facet="calls">\n<option value="">any</option>\n'
        '<option value="no">no</option>\n<option value="yes">yes</option>\n</select></label>'
    ) in index
    assert (
        '<li><code>broken.jinja</code>: <span class="error">TemplateSyntaxError: unexpected end of template</span></li>'
    ) in index
    assert (
        '<tr><td><a href="t/tools.jinja.html">tools.jinja</a></td><td>thinking</td><td>yes</td>'
        "<td>default_state none</td></tr>"
    ) in index
    assert '<script src="site.js"></script>' in index


def test_the_site_is_the_index_the_assets_and_a_page_per_template(files: dict[str, str]) -> None:
    assert sorted(files) == sorted(
        ["index.html", *ASSETS, "t/chatml.jinja.html", "t/tools.jinja.html", "t/user_only.jinja.html"]
    )
    assert '<link rel="stylesheet" href="../base.css">' in files["t/tools.jinja.html"]


def test_the_pages_are_rendered_through_the_given_map(
    templates: list[SiteTemplate], caps: dict[str, Caps], files: dict[str, str]
) -> None:
    seen: list[str] = []

    def recording(page: Callable[[SiteTemplate], str], shown: Iterable[SiteTemplate]) -> Iterable[str]:
        for template in shown:
            seen.append(template.name)
            yield page(template)

    assert site_files(
        templates, caps, {}, [DISAGREEMENT], title="chatcaps zoo: 3 templates in site", map_pages=recording
    ) == {
        **files,
        "index.html": index_page(caps, {}, [DISAGREEMENT], title="chatcaps zoo: 3 templates in site"),
    }
    assert seen == ["chatml.jinja", "tools.jinja", "user_only.jinja"]


def test_a_template_page_shows_the_call_format_and_end_of_turn(files: dict[str, str]) -> None:
    page = files["t/tools.jinja.html"]
    assert (
        '<pre id="call-format">object / json: - + &lt;tool_call&gt;{&#34;name&#34;: &#34;${name}&#34;, '
        "&#34;arguments&#34;: ${arguments}}&lt;/tool_call&gt; + - (sep -)</pre>"
    ) in page
    assert '<p>End of turn: <code id="end-of-turn">&#34;&lt;|im_end|&gt;&#34;</code></p>' in page
    assert '<tr><th scope="row">shape</th><td><code>&#34;object&#34;</code></td></tr>' in page
    assert "<tr><td>thinking</td><td>yes</td><td>default_state none</td></tr>" in page  # llama.cpp's differing verdict


def test_a_render_that_fails_shows_its_error_beside_the_polyfilled_prompt(files: dict[str, str]) -> None:
    assert (
        '<div><h4>raw</h4><pre class="error">TemplateRenderError: System role not supported</pre></div>\n'
        '<div><h4>with polyfills</h4><pre class="prompt">[INST] You are a concise and helpful assistant. Zq7System1\n'
        "\nWhat is the capital of France? Zq7User1 [/INST]</pre></div>\n</div>\n"
        '<details><summary>render report: applied roles</summary><pre class="report">applied:\n'
        "  - roles: messages[0]: system merged into the first user turn\n"
    ) in files["t/user_only.jinja.html"]


def test_the_difference_is_marked_word_by_word() -> None:
    assert diff_segments("<a> b c", "<a> x c") == (
        [("<a> ", ""), ("b", "removed"), (" c", "")],
        [("<a> ", ""), ("x", "added"), (" c", "")],
    )


def test_a_hostile_template_is_shown_escaped_under_a_safe_file_name() -> None:
    page = template_page(SiteTemplate(HOSTILE_NAME, HOSTILE_TEXT), [])
    assert "<script>" not in page
    assert "<h1>&lt;script&gt;alert(1)&lt;/script&gt;</h1>" in page
    assert (
        '<pre class="prompt">&lt;script&gt;alert(&#34;Hello! Please introduce yourself in one sentence. Zq7User1'
        "&#34;)&lt;/script&gt;</pre>"
    ) in page
    assert page_path(HOSTILE_NAME) == "t/_script_alert_1___script_-5c140d35dc.html"
    index = index_page({HOSTILE_NAME: detect_caps(HOSTILE_TEXT)}, {HOSTILE_NAME: HOSTILE_NAME}, [], title=HOSTILE_NAME)
    assert "<script>alert" not in index
