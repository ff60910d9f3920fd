"""The zoo harness: a mirror copied into a zoo folder, read back with its manifest, and the skip when absent."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatcaps.errors import SourceError
from chatcaps.zoo import MANIFEST_COLUMNS, load_zoo

ROOT = Path(__file__).parents[1]
TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def make_mirror(folder: Path, text: str = TEMPLATE, sha256: str | None = None) -> Path:
    (folder / "templates").mkdir(parents=True)
    (folder / "templates" / "org__model.jinja").write_text(text)
    digest = sha256 or hashlib.sha256(text.encode()).hexdigest()
    row = ["org__model.jinja", "org/model", "org/repo", "t.jinja", "abc", digest, "<s>", "</s>", 'a "quoted" note']
    header = "\t".join(MANIFEST_COLUMNS)
    (folder / "MANIFEST.tsv").write_text(header + "\n" + "\t".join(row) + "\n")
    return folder


def test_fetch_zoo_copies_a_mirror_that_load_zoo_reads_back(tmp_path: Path) -> None:
    mirror = make_mirror(tmp_path / "mirror")
    dest = tmp_path / "zoo"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fetch_zoo.py"), "--mirror", str(mirror), "--dest", str(dest)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == f"zoo: 1 templates in {dest}\n"
    [template] = load_zoo(dest)
    assert (template.file, template.model_id, template.bos_token, template.eos_token) == (
        "org__model.jinja",
        "org/model",
        "<s>",
        "</s>",
    )
    assert template.notes == 'a "quoted" note'
    assert template.read() == TEMPLATE


def test_a_template_that_disagrees_with_its_manifest_is_refused(tmp_path: Path) -> None:
    mirror = make_mirror(tmp_path / "mirror", sha256="0" * 64)
    with pytest.raises(SourceError, match="does not match the manifest"):
        load_zoo(mirror)


def test_zoo_tests_skip_with_one_line_saying_how_to_get_the_zoo(tmp_path: Path) -> None:
    env = {**os.environ, "CHATCAPS_ZOO": str(tmp_path / "nowhere")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", str(ROOT / "tests" / "engines" / "test_parity.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 2  # the per-template parity test and the minijinja rate, once each
    assert all("scripts/fetch_zoo.py --mirror ../shared/zoo" in line for line in skipped)
