"""Load on `chatcaps serve --upstream`: the latency it adds per request, and its memory over many requests.

    python scripts/bench_serve.py [--concurrency 8] [--requests 200] [--memory-requests 10000] [--time-limit-s 900]

Starts a llama-server with the tiny trained GGUF (tests/llama_server_harness.py, `--parallel` = concurrency) and
`chatcaps serve --upstream` in front of it as a subprocess (the real CLI), both on loopback. Then:

1. Latency: streaming requests, `concurrency` at a time, the same conversation, greedy, `max_tokens` each (fewer
   than the trained reply, so every side generates exactly that many tokens), in `rounds` alternating rounds of
   `requests` per side after a warm-up of each, on both APIs: to llama-server's own `/v1/chat/completions` and
   `/v1/messages` (where this llama-server has it), to chatcaps' two, and to llama-server's `/completion` with the
   prompt chatcaps renders (what chatcaps itself sends: the difference is chatcaps' own cost, rendering, reading
   and the extra hop). Per request: the time to the first text and to the end. Printed: p50 and p99 of each, and
   each chatcaps side minus llama-server's endpoint of the same API and minus `/completion`.
2. Memory: `memory-requests` requests (alternately streamed and not, one token each), each with different
   `chat_template_kwargs` (a flag the template reads, and a fresh unknown key), against chatcaps (half of them
   Anthropic requests, each with a system prompt of its own, where it serves `/v1/messages`); the server's RSS
   (/proc/PID/status VmRSS) after a warm-up and every fifth of the way. It must stay flat: nothing per request may be
   kept.

Bounded in count and in time (`time-limit-s` for the whole run; a phase that runs out says so). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from timing import percentile

from chatcaps import ChatTemplate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from llama_server_harness import free_port, start_llama_server
from tiny_model import tiny_gguf

HELLO = [{"role": "user", "content": "Hi there!"}]
WARM_UP = 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200, help="latency phase: requests per side and round")
    parser.add_argument("--rounds", type=int, default=3, help="latency phase: alternating rounds per side")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--memory-requests", type=int, default=10_000)
    parser.add_argument("--time-limit-s", type=float, default=900.0)
    args = parser.parse_args()
    deadline = time.monotonic() + args.time_limit_s
    folder = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    llama = start_llama_server(
        tiny_gguf(),
        log=folder / "llama-server.log",
        ctx_size=512 * args.concurrency,
        extra_args=["--parallel", str(args.concurrency), "--threads", "2", "--threads-batch", "2"],
    )
    serve, serve_url = _start_serve(llama.url, folder / "serve.log")
    try:
        print(f"llama-server {llama.url} (parallel {args.concurrency}), chatcaps serve {serve_url} (pid {serve.pid})")
        _latency(llama.url, serve_url, args, deadline)
        _memory(serve, serve_url, args, deadline)
    finally:
        serve.terminate()
        serve.wait(10)
        llama.stop()
    return 0


def _start_serve(upstream: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "chatcaps.cli", "serve", "--upstream", upstream, "--port", str(port)]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        if process.poll() is not None:
            raise RuntimeError(f"chatcaps serve exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError("chatcaps serve did not become healthy in 60 s")


async def _stream(
    client: httpx.AsyncClient, url: str, body: dict[str, object], path: str = "/v1/chat/completions"
) -> tuple[float, float]:
    """One streamed request: seconds to the first event with text (a delta, or `/completion`'s `content`), and to
    the end of the stream."""
    started = time.perf_counter()
    first = 0.0
    async with client.stream("POST", f"{url}{path}", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            event = json.loads(line[6:])
            if event.get("type") == "message_stop":  # Anthropic's last event
                break
            if not first and any(_texts(event)):
                first = time.perf_counter() - started
    return first, time.perf_counter() - started


def _texts(event: dict[str, Any]) -> tuple[str, ...]:
    """The text an event carries: a chat chunk's delta, an Anthropic block delta, or `/completion`'s `content`."""
    delta = (event.get("choices") or [{}])[0].get("delta") or event.get("delta") or event
    return tuple(str(delta.get(key) or "") for key in ("content", "reasoning_content", "text", "thinking"))


async def _run(count: int, concurrency: int, deadline: float, one: Callable[[int], Awaitable[object]]) -> int:
    """`count` calls of `one(index)`, `concurrency` at a time, until done or past `deadline`; how many ran."""
    done = 0
    next_index = 0

    async def worker() -> None:
        nonlocal done, next_index
        while next_index < count and time.monotonic() < deadline:
            index = next_index
            next_index += 1
            await one(index)
            done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


def _latency(llama_url: str, serve_url: str, args: argparse.Namespace, deadline: float) -> None:
    chat = {"model": "tiny", "messages": HELLO, "stream": True, "max_tokens": args.max_tokens, "temperature": 0.0}
    prompt = ChatTemplate.from_llama_server(llama_url).render(HELLO).prompt
    raw = {"prompt": prompt, "stream": True, "n_predict": args.max_tokens, "temperature": 0.0}
    sides = {
        "llama-server /v1/chat/completions": (llama_url, "/v1/chat/completions", chat),
        "llama-server /v1/messages": (llama_url, "/v1/messages", chat),
        "llama-server /completion, chatcaps' prompt": (llama_url, "/completion", raw),
        "chatcaps /v1/chat/completions": (serve_url, "/v1/chat/completions", chat),
        "chatcaps /v1/messages": (serve_url, "/v1/messages", chat),
    }
    for name, (url, path, _) in list(sides.items()):
        if path == "/v1/messages" and not _has_messages(url):
            del sides[name]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    failed: dict[str, list[str]] = {name: [] for name in sides}

    async def side(name: str, count: int, kept: bool) -> None:
        url, path, body = sides[name]
        limits = httpx.Limits(max_connections=args.concurrency)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:

            async def one(index: int) -> None:
                try:
                    timing = await _stream(client, url, body, path)
                except httpx.HTTPError as error:
                    failed[name].append(f"{type(error).__name__}: {error}")
                    return
                if kept:
                    results[name].append(timing)

            await _run(count, args.concurrency, deadline, one)

    for name in sides:  # warm-up, not measured
        asyncio.run(side(name, 4 * args.concurrency, kept=False))
    for _ in range(args.rounds):
        for name in sides:
            asyncio.run(side(name, args.requests, kept=True))
    print(
        f"\nlatency: {args.requests} x {args.rounds} streamed requests per side, {args.concurrency} concurrent, "
        f"{args.max_tokens} tokens each (ms)\n"
    )
    print("| endpoint | requests | failed | first text p50 | first text p99 | whole p50 | whole p99 |")
    print("|---|---|---|---|---|---|---|")
    stats = {}
    for name, values in results.items():
        firsts, wholes = [v[0] * 1e3 for v in values], [v[1] * 1e3 for v in values]
        stats[name] = [percentile(times, q) for times in (firsts, wholes) for q in (0.5, 0.99)]
        row = " | ".join(f"{value:.1f}" for value in stats[name])
        print(f"| {name} | {len(values)} | {len(failed[name])} | {row} |")
    for mine, (url, path, _) in sides.items():
        if url != serve_url:
            continue
        for baseline in (f"llama-server {path}", "llama-server /completion, chatcaps' prompt"):
            if baseline in stats:
                added = " | ".join(f"{a - b:+.1f}" for a, b in zip(stats[mine], stats[baseline], strict=True))
                print(f"| {mine} minus {baseline} | | | {added} |")
    for name, errors in failed.items():
        for error in sorted(set(errors)):
            print(f"{name}: {errors.count(error)} x {error}")


def _has_messages(url: str) -> bool:
    """Whether the server at `url` has Anthropic's `/v1/messages` (an empty body is a 400 there, a 404 without it)."""
    return httpx.post(f"{url}/v1/messages", json={}).status_code != 404


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _memory(serve: subprocess.Popen[bytes], serve_url: str, args: argparse.Namespace, deadline: float) -> None:
    total = args.memory_requests
    samples: list[tuple[int, int]] = []
    failures = 0
    anthropic = _has_messages(serve_url)

    async def batch(start: int, count: int) -> int:
        nonlocal failures
        limits = httpx.Limits(max_connections=args.concurrency)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:

            async def one(offset: int) -> None:
                nonlocal failures
                index = start + offset
                path, body = (
                    _messages_request(index)
                    if anthropic and index % 4 >= 2
                    else (
                        "/v1/chat/completions",
                        {
                            "messages": HELLO,
                            "max_tokens": 1,
                            "stream": index % 2 == 0,
                            "chat_template_kwargs": {"enable_thinking": index % 3 != 0, f"unused_{index}": index},
                        },
                    )
                )
                if body["stream"]:
                    await _stream(client, serve_url, body, path)
                else:
                    response = await client.post(f"{serve_url}{path}", json=body)
                    failures += response.status_code != 200

            return await _run(count, args.concurrency, deadline, one)

    asyncio.run(batch(-WARM_UP, WARM_UP))
    samples.append((0, _rss_kib(serve.pid)))
    step = max(total // 5, 1)
    done = 0
    started = time.perf_counter()
    while done < total and time.monotonic() < deadline:
        count = min(step, total - done)
        ran = asyncio.run(batch(done, count))
        done += ran
        samples.append((done, _rss_kib(serve.pid)))
        if ran < count:
            print(f"(memory phase stopped at the time limit after {done} requests)")
    seconds = time.perf_counter() - started
    kinds = "chat completions and Anthropic messages" if anthropic else "chat completions"
    print(f"\nmemory: chatcaps serve's RSS over {done} requests ({kinds}) with varied template inputs")
    print(f"({done / seconds:.0f} requests/s, {failures} failed; after {WARM_UP} warm-up requests)\n")
    print("| requests | RSS (MiB) |")
    print("|---|---|")
    for count, kib in samples:
        print(f"| {count} | {kib / 1024:.1f} |")
    print(f"\nRSS change: {(samples[-1][1] - samples[0][1]) / 1024:+.1f} MiB")


def _messages_request(index: int) -> tuple[str, dict[str, Any]]:
    """An Anthropic request of the memory phase: one token, streamed every other time, a system prompt of its own."""
    body = {"messages": HELLO, "max_tokens": 1, "stream": index % 2 == 0, "system": f"Request {index}."}
    return "/v1/messages", body


if __name__ == "__main__":
    sys.exit(main())
