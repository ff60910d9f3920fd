"""Where the tests' files are, for test modules at any depth under tests/ (they mirror src/chatcaps)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
DOCS = ROOT / "docs"
