#!/usr/bin/env bash
# The peer for `scripts/bench_reply.py --peers`: vLLM's own reasoning and tool-call parsers, in a venv of their own
# outside the repository (chatcaps never depends on vLLM). A full `pip install vllm` pulls CUDA torch and GPU kernels
# (GBs); the parser modules need none of it. So: the vLLM wheel without its dependencies, CPU torch from the wheel
# folder the project's own setup uses (torch 2.13.0+cpu; vLLM asks for 2.14.0, which its parsers never touch), and
# only what `vllm.reasoning`, `vllm.tool_parsers`, `vllm.parser`, the chat request type and a renderer built from a
# model config (tests/integrations/test_vllm_plugin.py) import. pip then reports vLLM's requirements left unmet
# (torch 2.14, the GPU kernels, fastapi's pin): expected, the parsers never use them.
# A second run only prints where it is.
#
#     bash scripts/peer_venv.sh     # PEER_VENV=~/.cache/chatcaps/peer-venv; VLLM_WHEEL=a downloaded wheel, else PyPI
set -euo pipefail

VENV=${PEER_VENV:-${CHATCAPS_BUILD_CACHE:-$HOME/.cache/chatcaps}/peer-venv}
WHEEL=${VLLM_WHEEL:-}
[ -n "$WHEEL" ] && [ -f "$WHEEL" ] || WHEEL="vllm==0.33.0"  # from the registry where no wheel file is given
CHECK='from vllm.reasoning import ReasoningParserManager; from vllm.tool_parsers import ToolParserManager
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
ReasoningParserManager.get_reasoning_parser("qwen3"); ToolParserManager.get_tool_parser("hermes")
import einops  # vLLM'"'"'s model registry, read when it builds a renderer from a model config'

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
  echo "peer venv: reusing $VENV ($("$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)'))"
  exit 0
fi

python3.11 -m venv "$VENV"
PIP=("$VENV/bin/pip" install --quiet --disable-pip-version-check)
# vllm itself, and torch CPU from the project's wheel folder (pip's find-links), both without dependencies.
"${PIP[@]}" --no-deps "$WHEEL"
"${PIP[@]}" --no-deps "torch==2.13.0+cpu"
# What the parser modules import, found by importing them until nothing was missing (pinned as first installed);
# their own dependencies resolve normally.
"${PIP[@]}" \
  "transformers==5.20.2" "tokenizers==0.23.3" "huggingface_hub==2.4.0" "sentencepiece==0.2.3" "safetensors==0.8.0" \
  "pydantic==2.14.4" "openai==3.57.0" "partial-json-parser==0.2.1.1.post7" "regex==2026.11.19" "msgspec==0.22.0" \
  "cachetools==8.0.2" "psutil==7.2.2" "py-cpuinfo==9.0.0" "PyYAML==6.0.4" "numpy==2.3.5" "jsonschema==4.26.0" \
  "orjson==3.13.0" "pybase64==1.5.1" "cbor2==6.3.0" "ijson==3.6.0" "protobuf==7.36.2" "cloudpickle==3.1.3" \
  "pyzmq==27.3.0" "aiohttp==3.14.5" "fastapi==0.165.0" "pillow==13.0.0" "prometheus_client==0.26.0" \
  "uvloop==0.23.0" "llguidance==1.7.6" "oss-harmony==0.0.11" "mistral_common==1.13.1" "tiktoken==0.14.0" "apache-tvm-ffi==0.1.11" \
  "einops==0.8.2" "packaging" "filelock" "requests" "tqdm" "typing_extensions" "sympy" "networkx" "jinja2" "fsspec"
# xgrammar is imported by vllm.parser for its types; its own dependencies (torch, CUDA bits) are not needed for that.
"${PIP[@]}" --no-deps "xgrammar==0.2.8"
"$VENV/bin/python" -c "$CHECK"
echo "peer venv: $VENV ($("$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)'))"
