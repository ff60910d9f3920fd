"""The template zoo: real chat templates kept outside the repository, found through a path.

A zoo folder holds `templates/*.jinja` and `MANIFEST.tsv` (file, hf_model_id, source_repo, source_path, source_commit,
sha256, bos_token, eos_token, notes). It is found through `CHATCAPS_ZOO`, else `templates_cache/zoo` in the working
directory or in the source checkout (`chatcaps.constants`); `scripts/fetch_zoo.py` fills the latter.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

from chatcaps.constants import ZOO_DEFAULT, ZOO_ENV, zoo_setting
from chatcaps.errors import SourceError

FETCH_HINT = f"python scripts/fetch_zoo.py --mirror ../shared/zoo  (or set {ZOO_ENV} to a zoo folder)"
LABELS_FILE = "llamacpp_labels.tsv"
"""Optional: what llama.cpp believes about some zoo templates (free text per column)."""
MANIFEST_COLUMNS = (
    "file",
    "hf_model_id",
    "source_repo",
    "source_path",
    "source_commit",
    "sha256",
    "bos_token",
    "eos_token",
    "notes",
)


@dataclass(frozen=True)
class ZooTemplate:
    """One zoo template and what its manifest row says about it."""

    file: str
    path: Path
    model_id: str
    sha256: str
    bos_token: str
    eos_token: str
    notes: str

    def read(self) -> str:
        return self.path.read_text(encoding="utf-8")


def zoo_dir() -> Path | None:
    """The zoo folder in use, or None when there is none (see the module docstring for the search order)."""
    configured = zoo_setting()
    if configured is not None:
        return configured
    checkout = Path(__file__).resolve().parents[2]
    for base in (Path.cwd(), checkout):
        candidate = base / ZOO_DEFAULT
        if (candidate / "MANIFEST.tsv").is_file():
            return candidate
    return None


def read_manifest(folder: Path) -> list[dict[str, str]]:
    with (folder / "MANIFEST.tsv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def load_zoo(folder: Path | None = None) -> tuple[ZooTemplate, ...]:
    """Every template of the zoo, sorted by file name; a file whose sha256 disagrees with the manifest is an error."""
    folder = folder if folder is not None else zoo_dir()
    if folder is None:
        raise SourceError(f"no template zoo found; get it with: {FETCH_HINT}")
    if not (folder / "MANIFEST.tsv").is_file():
        raise SourceError(f"{folder} holds no MANIFEST.tsv; get the zoo with: {FETCH_HINT}")
    templates = []
    for row in read_manifest(folder):
        path = folder / "templates" / row["file"]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if row.get("sha256") and digest != row["sha256"]:
            raise SourceError(f"{path}: sha256 {digest} does not match the manifest's {row['sha256']}")
        templates.append(
            ZooTemplate(
                file=row["file"],
                path=path,
                model_id=row.get("hf_model_id", ""),
                sha256=digest,
                bos_token=row.get("bos_token") or "",
                eos_token=row.get("eos_token") or "",
                notes=row.get("notes") or "",
            )
        )
    return tuple(sorted(templates, key=lambda template: template.file))
