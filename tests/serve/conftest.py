"""Every response a served app sent during a test was OpenAI's own shape (tests/serve_harness.py checks them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serve_harness import INVALID


@pytest.fixture(autouse=True)
def responses_are_openais() -> Iterator[None]:
    INVALID.clear()
    yield
    found, INVALID[:] = list(INVALID), []
    assert found == []
