"""Fill templates_cache/zoo/ with the template zoo, from a mirror folder or from the Hugging Face Hub.

    python scripts/fetch_zoo.py --mirror ../shared/zoo        copy a mirror (verifies every sha256)
    python scripts/fetch_zoo.py --hub Qwen/Qwen3-8B ...        download templates by model id (huggingface-hub)

The zoo is data from public repositories: it lives in templates_cache/ (git-ignored) and is never committed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import shutil
import sys
from pathlib import Path

from chatcaps.errors import ChatcapsError
from chatcaps.sources import from_hub
from chatcaps.zoo import LABELS_FILE, MANIFEST_COLUMNS, read_manifest

DEFAULT_DEST = Path(__file__).resolve().parents[1] / "templates_cache" / "zoo"


def copy_mirror(mirror: Path, dest: Path) -> int:
    rows = read_manifest(mirror)
    (dest / "templates").mkdir(parents=True, exist_ok=True)
    for row in rows:
        source = mirror / "templates" / row["file"]
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        if digest != row["sha256"]:
            raise SystemExit(f"{source}: sha256 {digest} != manifest {row['sha256']}")
        shutil.copyfile(source, dest / "templates" / row["file"])
    shutil.copyfile(mirror / "MANIFEST.tsv", dest / "MANIFEST.tsv")
    if (mirror / LABELS_FILE).is_file():  # what llama.cpp believes; docs/zoo.md compares it with chatcaps
        shutil.copyfile(mirror / LABELS_FILE, dest / LABELS_FILE)
    return len(rows)


def fetch_hub(model_ids: list[str], dest: Path) -> int:
    manifest = dest / "MANIFEST.tsv"
    rows = {row["file"]: row for row in read_manifest(dest)} if manifest.is_file() else {}
    (dest / "templates").mkdir(parents=True, exist_ok=True)
    for model_id in model_ids:
        try:
            source = from_hub(model_id)
        except ChatcapsError as error:
            print(f"{model_id}: {error}", file=sys.stderr)
            continue
        file = model_id.replace("/", "__") + ".jinja"
        (dest / "templates" / file).write_text(source.text, encoding="utf-8")
        rows[file] = {
            "file": file,
            "hf_model_id": model_id,
            "source_repo": model_id,
            "source_path": source.name,
            "source_commit": "",
            "sha256": hashlib.sha256(source.text.encode("utf-8")).hexdigest(),
            "bos_token": source.bos_token,
            "eos_token": source.eos_token,
            "notes": "fetched from the Hub",
        }
    with manifest.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=MANIFEST_COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows[file] for file in sorted(rows))
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--mirror", type=Path, help="a zoo folder holding templates/ and MANIFEST.tsv")
    group.add_argument("--hub", nargs="+", metavar="MODEL_ID", help="model ids to fetch from the Hub")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"zoo folder to fill (default {DEFAULT_DEST})")
    args = parser.parse_args()
    count = copy_mirror(args.mirror, args.dest) if args.mirror else fetch_hub(args.hub, args.dest)
    print(f"zoo: {count} templates in {args.dest}")


if __name__ == "__main__":
    main()
