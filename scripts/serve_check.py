"""An OpenAI-compatible server end to end on chatcaps' tiny trained model, through the official `openai` client:
`vllm serve` with the chatcaps plugin (docs/vllm.md), or `chatcaps serve --model` as the reference.

The tiny model (tests/tiny_model.py) is trained until greedy decoding writes each of its chats' replies exactly, in
two forms: thinking (reasoning in a <think> block, then the content) and off (the generation prompt prefills an empty
block). So a server that reads the reply right answers each chat with exactly the trained reasoning and content,
whole and streamed; with `reasoning_effort: "none"` (the template's `enable_thinking=false`), the content alone.

    python scripts/serve_check.py --server vllm        # needs vLLM with a GPU and `pip install 'chatcaps[vllm]'`
    python scripts/serve_check.py --server chatcaps    # the same checks against chatcaps serve --model (CPU)

Prints one line per check and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from tiny_model import tiny_model_dir  # noqa: E402

CHATS = ROOT / "tests" / "data" / "tiny_model" / "chats.json"
STARTUP_S = 600.0


def command(server: str, model: Path, port: int) -> list[str]:
    """The server's command line: the one docs/vllm.md gives, or chatcaps' own server."""
    if server == "vllm":
        return [
            *("vllm", "serve", str(model), "--port", str(port), "--dtype", "float32", "--max-model-len", "512"),
            *("--enforce-eager", "--tokenizer-mode", "chatcaps", "--enable-auto-tool-choice"),
            *("--tool-call-parser", "chatcaps", "--reasoning-parser", "chatcaps"),
        ]
    return [sys.executable, "-m", "chatcaps.cli", "serve", "--model", str(model), "--port", str(port)]


@contextmanager
def running(argv: list[str], port: int) -> Iterator[str]:
    """The server started, answering /health; stopped afterwards."""
    process = subprocess.Popen(argv, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the server exited ({process.returncode}) before answering: {' '.join(argv)}")
            try:
                if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the server did not answer /health in {STARTUP_S:.0f} s")
            time.sleep(1.0)
        yield f"{base}/v1"
    finally:
        process.terminate()
        process.wait(timeout=60)


def reasoning_of(part: Any) -> str:
    """The reasoning a message or delta carries: vLLM names it `reasoning`, chatcaps `reasoning_content`."""
    extra: Mapping[str, Any] = part.model_extra or {}
    return str(extra.get("reasoning") or extra.get("reasoning_content") or "")


def answers(client: OpenAI, model: str, messages: list[dict[str, Any]], effort: str | None) -> list[dict[str, str]]:
    """The server's message for `messages`, whole and streamed (deltas joined), greedy."""
    options: dict[str, Any] = {"model": model, "messages": messages, "temperature": 0.0, "max_tokens": 96}
    if effort is not None:
        options["reasoning_effort"] = effort
    whole = client.chat.completions.create(**options).choices[0].message
    got = [{"reasoning": reasoning_of(whole), "content": whole.content or "", "calls": str(whole.tool_calls or "")}]
    streamed = {"reasoning": "", "content": "", "calls": ""}
    for chunk in client.chat.completions.create(**options, stream=True):
        for choice in chunk.choices:
            streamed["reasoning"] += reasoning_of(choice.delta)
            streamed["content"] += choice.delta.content or ""
            streamed["calls"] += str(choice.delta.tool_calls or "")
    return [*got, streamed]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["vllm", "chatcaps"], required=True)
    parser.add_argument("--port", type=int, default=0, help="default: a free one")
    args = parser.parse_args()
    port = args.port or free_port()
    model = tiny_model_dir()
    chats = json.loads(CHATS.read_text(encoding="utf-8"))["chats"]
    failed = 0
    with running(command(args.server, model, port), port) as base:
        client = OpenAI(base_url=base, api_key="unused")
        served = client.models.list().data[0].id
        for chat in chats:
            for effort, reasoning in ((None, chat["reply"]["reasoning_content"]), ("none", "")):
                want = {"reasoning": reasoning, "content": chat["reply"]["content"], "calls": ""}
                got = answers(client, served, chat["messages"], effort)
                for form, message in zip(("whole", "streamed"), got, strict=True):
                    ok = message == want
                    failed += not ok
                    asked = chat["messages"][-1]["content"]
                    print(f"{'ok  ' if ok else 'FAIL'} {form:8} effort={effort!s:5} {asked!r}")
                    if not ok:
                        print(f"     want {want}\n     got  {message}")
    print(f"{args.server}: {'all checks passed' if not failed else f'{failed} checks failed'}")
    return 1 if failed else 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
