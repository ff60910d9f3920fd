"""The template zoo: real chat templates kept outside the repository, found through a path.

A zoo folder holds `templates/*.jinja` and `MANIFEST.tsv` (file, hf_model_id, source_repo, source_path, source_commit,
sha256, bos_token, eos_token, notes). It is found through `CHATCAPS_ZOO`, else `templates_cache/zoo` in the working
directory or in the source checkout (`chatcaps.constants`); `scripts/fetch_zoo.py` fills the latter.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from chatcaps.caps import Caps
from chatcaps.constants import ZOO_DEFAULT, ZOO_ENV, zoo_setting
from chatcaps.errors import SourceError

FETCH_HINT = f"python scripts/fetch_zoo.py --mirror ../shared/zoo  (or set {ZOO_ENV} to a zoo folder)"
LABELS_FILE = "llamacpp_labels.tsv"
"""Optional: what llama.cpp believes about some zoo templates (free text per column)."""
_MARKERS = re.compile(r"^(\S.*?) -> (\S.*?)(?: \(| \||$)")
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


def read_labels(zoo: Path) -> list[dict[str, str]]:
    """The zoo's `LABELS_FILE` rows (none when it has no such file)."""
    path = zoo / LABELS_FILE
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def disagreements(
    caps_by_file: Mapping[str, Caps], labels: Sequence[Mapping[str, str]]
) -> list[tuple[str, str, str, str]]:
    """(file, what, llama.cpp says, chatcaps says) for thinking support, markers and forced-open generation prompts."""
    found = []
    for label in labels:
        caps = caps_by_file.get(label["file"])
        if caps is None:
            continue
        reasoning = caps.reasoning
        said = label["supports_thinking"].strip().lower().removeprefix("(p) ")
        ours = reasoning.default_state != "none"
        if said.startswith(("yes", "no")) and said.startswith("yes") != ours:
            found.append(
                (label["file"], "thinking", label["supports_thinking"], f"default_state {reasoning.default_state}")
            )
        match = _MARKERS.match(label["reasoning_markers"].strip())
        if match and (match.group(1).strip(), match.group(2).strip()) != (reasoning.start_marker, reasoning.end_marker):
            ours_markers = f"{reasoning.start_marker} -> {reasoning.end_marker}"
            found.append((label["file"], "markers", label["reasoning_markers"], ours_markers))
        forced = label["forced_open"].strip().lower().removeprefix("(p) ")
        if forced.startswith(("yes", "forced-open", "no")):
            said_forced = not forced.startswith("no")
            if said_forced != (reasoning.default_state == "forced_open"):
                found.append((label["file"], "forced_open", label["forced_open"], reasoning.default_state))
    return found
