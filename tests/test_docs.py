"""The Python examples in the docs run as written and print what the page shows (see `helpers.check_doc_examples`).

Pages whose examples need the tiny trained model or llama.cpp are checked by their integration tests instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import check_doc_examples

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("page", ["hook.md", "quickstart.md"])
def test_examples_run(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    check_doc_examples(DOCS / page, capsys)
