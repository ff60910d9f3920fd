"""The isolated minijinja worker (`isolation`'s other end): caps its own memory, then renders what it is sent.

Its own module so that the dependency runs one way: this imports the engine, the engine imports `isolation` (the
caller's side), and `isolation` imports neither.
"""

from __future__ import annotations

import os
import pickle
import sys
from contextlib import nullcontext
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from chatcaps.engines.builtins import pinned_clock
from chatcaps.engines.isolation import READY
from chatcaps.engines.minijinja_engine import MinijinjaRenderer
from chatcaps.errors import ChatcapsError, TemplateRenderError
from chatcaps.lru import LastUsed

_WORKER_TEMPLATES = 64
"""Compiled templates a worker keeps; one evicted is sent again (the caller resends on a miss)."""


def _cap_memory(memory_bytes: int) -> None:
    """Cap the address space at what the worker uses now plus `memory_bytes` (Linux; elsewhere uncapped), and write
    no core file when an allocation past it aborts the worker (writing a gigabyte core takes seconds)."""
    import resource  # POSIX only, as isolation is (`isolation.require`): chatcaps itself imports without it

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        with open("/proc/self/statm", "rb") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return
    resource.setrlimit(resource.RLIMIT_AS, (size + memory_bytes, size + memory_bytes))


def _serve(requests: Connection, replies: Connection) -> None:
    compiled: LastUsed[int, MinijinjaRenderer] = LastUsed(_WORKER_TEMPLATES)
    while True:
        try:
            token, source, name, limits, payload, now = pickle.loads(requests.recv_bytes())
        except EOFError:
            return
        renderer = compiled.get(token)
        if renderer is None and source is None:
            replies.send_bytes(pickle.dumps(("unknown",)))
            continue
        reply: tuple[Any, ...]
        try:
            if renderer is None:
                renderer = MinijinjaRenderer(source, name=name, limits=replace(limits, isolate=False))
                compiled.put(token, renderer)
            with pinned_clock(now) if now is not None else nullcontext():  # the caller's pinned clock (probes)
                reply = ("ok", renderer.render(pickle.loads(payload)))
        except ChatcapsError as error:
            reply = ("error", error)
        except Exception as error:  # a bug in chatcaps, reported rather than killing the worker
            reply = ("error", TemplateRenderError(f"{type(error).__name__}: {error}", template_name=name))
        replies.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def main() -> None:
    """`python -c "from chatcaps.engines.isolation_worker import main; main()" MEMORY READ_FD WRITE_FD`."""
    memory_bytes, read_fd, write_fd = (int(argument) for argument in sys.argv[1:4])
    requests = Connection(read_fd, writable=False)
    replies = Connection(write_fd, readable=False)
    if memory_bytes:
        _cap_memory(memory_bytes)  # chatcaps and minijinja are imported above: the cap is measured after them
    replies.send_bytes(READY)
    _serve(requests, replies)
