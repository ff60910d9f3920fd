"""The Python examples in the docs run as written: every ```python block of the pages listed here, in order, in one
namespace per page (a page's later blocks may use what its earlier ones defined)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
RUNNABLE = ("hook.md", "quickstart.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", RUNNABLE)
def test_examples_run(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS / page).read_text("utf-8")
    blocks = _BLOCK.findall(text)
    assert blocks, f"{page} has no python example"
    namespace: dict[str, object] = {"__name__": f"docs.{page}"}
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    # A line printed by an example is shown in the page as the comment right after the print call.
    expected = [line.strip().removeprefix("# ") for block in blocks for line in _comment_after_print(block)]
    assert printed == expected


def _comment_after_print(block: str) -> list[str]:
    lines = block.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines[:-1]) if line.startswith("print(")]
