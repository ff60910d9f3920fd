#!/usr/bin/env bash
# The main job for a newcomer: set up, then render a conversation with tools and reasoning through a zoo template.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
TEMPLATE=${1:-templates_cache/zoo/templates/llamacpp__Qwen-Qwen3-0.6B.jinja}
.venv/bin/chatcaps render "$TEMPLATE" --messages contexts/tool_call_loop_reasoning.json
