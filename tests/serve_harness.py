"""`chatcaps serve` in-process on a free loopback port (uvicorn's `Server` in a thread), and helpers that read its
answers: ids and timestamps blanked, streamed chunks reduced to their deltas. Used by the serve tests and
scripts/bench_serve.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from llama_server_harness import free_port

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@contextmanager
def serving(app: Any, *, timeout_s: float = 30.0) -> Iterator[str]:
    """Run `app` with uvicorn in a thread until the block ends; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)


def normalised(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with what changes per response blanked: a `chatcmpl-` id, `created`."""
    shown: dict[str, Any] = {}
    for key, value in data.items():
        if key == "id" and isinstance(value, str) and value.startswith("chatcmpl-"):
            value = "chatcmpl-*"
        elif key == "created":
            value = "*"
        elif isinstance(value, list):
            value = [normalised(item) if isinstance(item, Mapping) else item for item in value]
        shown[key] = value
    return shown


def chunks_of(chunks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each `chat.completion.chunk` as its delta, plus its finish reason and `chatcaps` report where it has them; the
    usage chunk as `{"usage": ...}`."""
    reduced: list[dict[str, Any]] = []
    for chunk in chunks:
        if not chunk["choices"]:
            reduced.append({"usage": chunk["usage"]})
            continue
        choice = chunk["choices"][0]
        entry = dict(choice["delta"])
        if choice.get("finish_reason") is not None:
            entry["finish_reason"] = choice["finish_reason"]
        if "chatcaps" in chunk:
            entry["chatcaps"] = chunk["chatcaps"]
        reduced.append(entry)
    return reduced
