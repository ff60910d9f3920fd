"""Write docs/zoo.md: the caps matrix over the zoo and the disagreements with llama.cpp's labels.

python scripts/zoo_doc.py            (re)write docs/zoo.md
python scripts/zoo_doc.py --check    exit 1 when docs/zoo.md is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chatcaps import detect_caps
from chatcaps.zoo import load_zoo, zoo_dir
from chatcaps.zoo_doc import read_labels, render_doc

DOCS = Path(__file__).resolve().parent.parent / "docs"


def build() -> str:
    caps = {template.file: detect_caps(template.read()) for template in load_zoo()}
    folder = zoo_dir()
    labels = read_labels(folder) if folder else []
    reviews = json.loads((DOCS / "zoo_reviews.json").read_text("utf-8"))
    return render_doc(caps, labels, reviews)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = build()
    target = DOCS / "zoo.md"
    if args.check:
        stale = not target.is_file() or target.read_text("utf-8") != text
        print("docs/zoo.md is stale: run python scripts/zoo_doc.py" if stale else "docs/zoo.md is current")
        return int(stale)
    target.write_text(text, "utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
