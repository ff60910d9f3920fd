#!/usr/bin/env bash
# Set up a development environment: .venv with chatcaps at the versions locked in constraints.txt, and the template
# zoo in templates_cache/. `--test` adds the test tools, transformers, torch, Debian's Chromium and llama-cpp-python
# (built once from its sdist, ~9 min on 2 cores, then reused from the build cache). Safe to run again; used by
# scripts/demo.sh (without --test: the main job needs none of the llama.cpp builds) and scripts/test.sh (with it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

EXTRAS=""
[ "${1:-}" = "--test" ] && EXTRAS="[test]"

PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "chatcaps needs Python >= 3.11"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
"${PIP[@]}" install --quiet --upgrade pip 2>/dev/null
"${PIP[@]}" install --quiet -c constraints.txt -e ".$EXTRAS" 2>/dev/null \
  || "${PIP[@]}" install -c constraints.txt -e ".$EXTRAS"
if [ -n "$EXTRAS" ]; then
  bash scripts/install_llama_cpp_python.sh
  # tests/browser drive Debian's Chromium through Playwright (no browser download at run time)
  if ! command -v chromium >/dev/null; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; } \
      || echo "setup: could not install Debian's chromium; tests/browser will be skipped" >&2
  fi
fi

ZOO_MIRROR=${ZOO_MIRROR:-../shared/zoo}
if [ -z "${CHATCAPS_ZOO:-}" ] && [ -f "$ZOO_MIRROR/MANIFEST.tsv" ]; then
  .venv/bin/python scripts/fetch_zoo.py --mirror "$ZOO_MIRROR"
fi
