#!/usr/bin/env bash
# Set up a development environment: .venv with chatcaps and every extra, and the template zoo in templates_cache/.
# Safe to run again; sourced by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "chatcaps needs Python >= 3.11"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>/dev/null
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' 2>/dev/null \
  || .venv/bin/python -m pip install --disable-pip-version-check -e '.[test]'
bash scripts/install_llama_cpp_python.sh  # sdist only on PyPI: built once (~9 min), then skipped

ZOO_MIRROR=${ZOO_MIRROR:-../shared/zoo}
if [ -z "${CHATCAPS_ZOO:-}" ] && [ -f "$ZOO_MIRROR/MANIFEST.tsv" ]; then
  .venv/bin/python scripts/fetch_zoo.py --mirror "$ZOO_MIRROR"
fi
