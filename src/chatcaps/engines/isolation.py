"""minijinja renders in a child process whose address space is capped: the bounds minijinja lacks in-process.

minijinja's Rust core does work its fuel does not meter (it joins, prints and concatenates lazily repeated lists, and
copies an input string each time a template reads it) and aborts the process when an allocation fails; its Python
binding holds the GIL throughout and offers no hook to interrupt it. With `Limits(isolate=True)` (the default) a
minijinja render runs in a worker process instead, capped at its starting size plus `Limits.max_memory_bytes`
(`RLIMIT_AS`): a runaway template kills the worker, not the caller, and becomes a `RenderLimitError`
(`max_memory_bytes`, or `time_s` when the worker does not answer within `time_s` plus a grace).

Workers are kept in a pool per memory cap and reused: each compiles a template the first time it is asked to render
it. A request is one pickled tuple over a pipe (plain data in, a string or the chatcaps error out), so a render
costs one round trip more than in-process (about 135 us on the 2-core CI machine, whose bare pipe round trip is
70 us; see docs/security.md). The worker's side is `isolation_worker`, which imports the engine; this module does
not. The template inside the worker sees only the read-only data `MinijinjaRenderer` gives it, and sends back only
text.

The pool starts each worker as `python -c "from chatcaps.engines.isolation_worker import main; main()" MEMORY READ
WRITE`; the worker says it is ready once it has imported chatcaps and capped itself, and only then does a render's
clock start. Isolation is POSIX only (the cap is `resource.setrlimit`, the pipes are passed with `pass_fds`): where
Python has no `resource` module (Windows) asking for it raises `InputError` when the template is compiled.
"""

from __future__ import annotations

import atexit
import itertools
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from chatcaps.engines.base import Limits, can_isolate
from chatcaps.engines.builtins import pinned_now
from chatcaps.errors import ChatcapsError, InputError, RenderLimitError, TemplateRenderError

GRACE_S = 0.25
"""How long past `time_s` the caller waits for an answer before it kills the worker. Fuel normally stops the render
first; this bounds what fuel does not meter (one Rust operation on gigabytes) and a slower machine."""
START_S = 30.0
"""How long a new worker may take to start (import chatcaps) before the render fails; ~0.2 s measured. Not part of
the render's `time_s`: the worker says when it is ready, and the render is sent then."""
READY = b"ready"
"""What a worker sends once it has started, before its first request."""
_IDLE_WORKERS = 8
"""Idle workers kept per memory cap; more concurrent renders start more, and the extra ones end when released."""
_WORKER_MAIN = "from chatcaps.engines.isolation_worker import main; main()"
_tokens = itertools.count(1)


def require() -> None:
    """Raise `InputError` where isolation cannot run: a Python without the POSIX `resource` module."""
    if not can_isolate():
        raise InputError(
            "Limits(isolate=True) needs a POSIX system (Python's `resource` module is missing here): "
            "use isolate=False or the jinja2 engine, whose renders are bounded in-process"
        )


def new_token() -> int:
    """A process-unique number for one compiled template: workers cache their own compilation of it by this."""
    return next(_tokens)


# ---------------------------------------------------------------------------------------------------------- parent


@dataclass
class _Worker:
    """One worker process and the templates it has compiled."""

    process: subprocess.Popen[bytes]
    requests: Connection
    replies: Connection
    known: set[int] = field(default_factory=set)
    ready: bool = False

    def close(self) -> None:
        self.requests.close()
        self.replies.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


_KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT", "TMPDIR")


def _worker_environment() -> dict[str, str]:
    """No secrets for the worker: the caller's import path (so it imports this very chatcaps) and the locale only."""
    environment = {name: os.environ[name] for name in _KEPT_VARIABLES if name in os.environ}
    environment["PYTHONPATH"] = os.pathsep.join(entry for entry in sys.path if entry)
    return environment


def _start(memory_bytes: int | None) -> _Worker:
    parent_reads, child_writes = os.pipe()
    child_reads, parent_writes = os.pipe()
    command = [sys.executable, "-c", _WORKER_MAIN, str(memory_bytes or 0), str(child_reads), str(child_writes)]
    try:
        process = subprocess.Popen(
            command,
            env=_worker_environment(),
            pass_fds=(child_reads, child_writes),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    except BaseException:
        for descriptor in (parent_reads, parent_writes):
            os.close(descriptor)
        raise
    finally:
        os.close(child_reads)
        os.close(child_writes)
    return _Worker(process, Connection(parent_writes, readable=False), Connection(parent_reads, writable=False))


class _Pool:
    """Idle workers per memory cap; thread-safe. After a fork the child starts its own (the parent's stay theirs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[int | None, list[_Worker]] = {}
        self._pid = os.getpid()

    def take(self, memory_bytes: int | None) -> _Worker:
        with self._lock:
            if self._pid != os.getpid():
                self._idle, self._pid = {}, os.getpid()
            idle = self._idle.get(memory_bytes)
            if idle:
                return idle.pop()
        return _start(memory_bytes)

    def give(self, memory_bytes: int | None, worker: _Worker) -> None:
        with self._lock:
            idle = self._idle.setdefault(memory_bytes, [])
            if self._pid == os.getpid() and len(idle) < _IDLE_WORKERS:
                idle.append(worker)
                return
        worker.close()

    def close(self) -> None:
        """End every idle worker (at exit; tests call it to measure the workers' peak memory)."""
        with self._lock:
            workers = [worker for idle in self._idle.values() for worker in idle] if self._pid == os.getpid() else []
            self._idle = {}
        for worker in workers:
            worker.close()


POOL = _Pool()
atexit.register(POOL.close)


def render(token: int, source: str, name: str, limits: Limits, variables: Mapping[str, Any]) -> str:
    """Render a minijinja template in a worker and return its output, or raise the chatcaps error the worker met."""
    try:
        payload = pickle.dumps(dict(variables), protocol=pickle.HIGHEST_PROTOCOL)
    except RecursionError as error:
        raise RenderLimitError(
            "render input is nested deeper than Python's recursion limit", limit="max_recursion", template_name=name
        ) from error
    except (pickle.PicklingError, TypeError, AttributeError) as error:  # a function or an object, not data
        raise InputError(
            f"an isolated render takes plain data (it is sent to a worker process): {error}; render in-process "
            "(Limits(isolate=False)) to pass Python objects to a template you trust"
        ) from error
    worker = POOL.take(limits.max_memory_bytes)
    try:
        if not worker.ready:
            _wait_ready(worker, limits, name)
        now = pinned_now()
        sent = None if token in worker.known else source
        reply = _ask(worker, (token, sent, name, limits, payload, now), limits, name)
        if reply == ("unknown",):
            reply = _ask(worker, (token, source, name, limits, payload, now), limits, name)
        worker.known.add(token)
    except BaseException:
        worker.close()
        raise
    POOL.give(limits.max_memory_bytes, worker)
    return _result(reply)


def _wait_ready(worker: _Worker, limits: Limits, name: str) -> None:
    """Wait for a new worker to start, so that its start-up is not charged to the render's `time_s`."""
    if not worker.replies.poll(START_S):
        raise TemplateRenderError(f"the render's worker process did not start within {START_S} s", template_name=name)
    try:
        worker.replies.recv_bytes()
    except (EOFError, OSError):
        raise _died(worker, limits, name) from None
    worker.ready = True


def _ask(worker: _Worker, request: tuple[Any, ...], limits: Limits, name: str) -> tuple[Any, ...]:
    try:
        worker.requests.send_bytes(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
    except (BrokenPipeError, OSError):
        raise _died(worker, limits, name) from None
    if not worker.replies.poll(limits.time_s + GRACE_S):
        raise RenderLimitError(
            f"render did not finish within time_s={limits.time_s} (+{GRACE_S} s grace); its worker was killed",
            limit="time_s",
            template_name=name,
        )
    try:
        reply: tuple[Any, ...] = pickle.loads(worker.replies.recv_bytes())
    except (EOFError, OSError):
        raise _died(worker, limits, name) from None
    return reply


def _died(worker: _Worker, limits: Limits, name: str) -> ChatcapsError:
    """The error for a worker that ended mid-render: out of memory (an abort, or killed), or something else."""
    worker.requests.close()
    try:
        code = worker.process.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:  # alive but its pipe is broken: end it
        worker.process.kill()
        code = worker.process.wait()
    stderr = worker.process.stderr.read().decode("utf-8", "replace") if worker.process.stderr else ""
    lines = [line for line in stderr.splitlines() if line.strip()]
    said = next((line for line in lines if "memory allocation" in line), lines[-1] if lines else f"exit {code}")
    if code in (-signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV) or "memory allocation" in stderr:
        return RenderLimitError(
            f"render ran out of memory (max_memory_bytes={limits.max_memory_bytes}) and its worker died: {said}",
            limit="max_memory_bytes",
            template_name=name,
        )
    return TemplateRenderError(f"the render's worker process died: {said}", template_name=name)


def _result(reply: tuple[Any, ...]) -> str:
    """The worker's output, or the error its renderer raised (built there, with the template's name)."""
    if reply[0] == "ok":
        output: str = reply[1]
        return output
    error: ChatcapsError = reply[1]
    raise error
