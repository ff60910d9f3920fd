#!/usr/bin/env bash
# The main job for a newcomer: set up, show what a zoo template can do (its Caps), then render a conversation with
# tools and reasoning through it with reasoning switched off, and the report of what chatcaps did.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
TEMPLATE=${1:-templates_cache/zoo/templates/llamacpp__Qwen-Qwen3-0.6B.jinja}
.venv/bin/chatcaps detect "$TEMPLATE"
echo
.venv/bin/chatcaps render "$TEMPLATE" --messages src/chatcaps/contexts/tool_call_loop_reasoning.json --reasoning off --report
