#!/usr/bin/env bash
# The chatcaps vLLM plugin's tests (tests/integrations/test_vllm_plugin.py) in the peer venv, which has vLLM's parser
# layer on CPU (scripts/peer_venv.sh; the project's venv never gets vLLM, which pulls CUDA torch). chatcaps goes in
# without dependencies, plus what it needs that the peer venv lacks, at the versions constraints.txt pins;
# transformers is raised to the pinned 5.24.0 (vLLM 0.33.0 asks for <5.21, which its parser layer does not need, and
# chatcaps reads pythonic calls with 5.24's `python-call-list`). A second run reinstalls only chatcaps.
#
#     bash scripts/vllm_plugin_check.sh [pytest args]      # PEER_VENV=~/.cache/chatcaps/peer-venv, CHATCAPS_ZOO for the zoo
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${PEER_VENV:-${CHATCAPS_BUILD_CACHE:-$HOME/.cache/chatcaps}/peer-venv}
bash "$ROOT/scripts/peer_venv.sh"
pin() { grep -iE "^($(IFS='|'; echo "$*"))==" "$ROOT/constraints.txt"; }
NEEDED=(transformers minijinja httpx httpcore pytest iniconfig pluggy hypothesis sortedcontainers)
if ! "$VENV/bin/python" -c "import minijinja, httpx, pytest, hypothesis" 2>/dev/null \
  || [ "$("$VENV/bin/python" -c 'import transformers; print(transformers.__version__)')" != "$(pin transformers | cut -d= -f3)" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check $(pin "${NEEDED[@]}")
fi
# This checkout's entry point (another checkout may be the one installed), from a copy: an install from the checkout
# (editable or not) writes src/chatcaps.egg-info there, which pip then takes for an installed chatcaps wherever
# PYTHONPATH holds src (tests/test_wheel.py's fresh venv stays empty). The tests import that installed copy, not src:
# the project venv's editable install leaves src/chatcaps.egg-info, whose entry points may be older than pyproject's.
COPY=$(mktemp -d)
trap 'rm -rf "$COPY"' EXIT
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$COPY/"
(cd "$ROOT" && tar cf - --exclude='*.egg-info' --exclude=__pycache__ src) | (cd "$COPY" && tar xf -)
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$COPY"
cd "$ROOT"
HF_HUB_OFFLINE=1 "$VENV/bin/python" -m pytest tests/integrations/test_vllm_plugin.py -q -p no:cacheprovider "$@"
