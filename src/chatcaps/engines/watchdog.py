"""A wall-clock and memory bound for pure-Python work (jinja2 renders) without a thread or a process per render.

One daemon thread watches armed deadlines and, when one passes, raises `Expired` inside the thread that armed it
(`PyThreadState_SetAsyncExc`). The exception lands at the next bytecode boundary, which for jinja2 is at most one
loop iteration away; long single C calls (a huge `*`, `join`, `replace`) are bounded separately by the sandbox hooks.

While deadlines are armed it also samples the process' resident memory every tick: a render armed with a memory
budget gets `OverMemory` once the process has grown by more than the budget since the first sample taken after it
was armed (renders shorter than one tick cost no sample). Memory is per process, so growth from other threads
counts too; the budget is meant for runaway templates, gigabytes, not for accounting. Where the process' memory
cannot be read (no /proc and no `resource` module, e.g. Windows) the budget is not enforced; the deadline still is.

The exception is injected at most once per render and any pending one is withdrawn when the render is disarmed,
so a render that finished in time never sees it.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

_TICK_S = 0.02
"""How often the watchdog looks while deadlines are armed; the bound is `time_s` plus at most this."""
_LINGER_S = 1.0
"""How long the watchdog keeps ticking after the last deadline, so back-to-back renders need no wake-up."""
_STATM = "/proc/self/statm"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Expired(BaseException):
    """Raised inside a render whose deadline passed; a BaseException, so no `except Exception` on the way eats it."""


class OverMemory(Expired):
    """Raised inside a render while the process grew by more than the render's memory budget."""


def resident_bytes() -> int | None:
    """The process' resident memory now (Linux); elsewhere its peak so far, which only grows; None where neither can
    be read."""
    try:
        with open(_STATM, "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:
        pass
    try:
        import resource  # POSIX only: imported here so that chatcaps imports where it is missing
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@dataclass(slots=True)
class _Armed:
    thread_id: int
    deadline: float
    memory: int | None
    baseline: int | None = field(default=None)
    fired: bool = field(default=False)


class _Watchdog:
    def __init__(self) -> None:
        # `arm` and `disarm`, once per jinja2 render, take the lock itself: a Condition's `with` is a Python call.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._armed: dict[int, _Armed] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None
        self._sleeping = False

    def arm(self, seconds: float, memory: int | None) -> int:
        with self._lock:
            key = next(self._keys)
            self._armed[key] = _Armed(threading.get_ident(), time.monotonic() + seconds, memory)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="chatcaps-watchdog", daemon=True)
                self._thread.start()
            elif self._sleeping:
                self._cond.notify()
            return key

    def disarm(self, key: int) -> None:
        with self._lock:
            armed = self._armed.pop(key, None)
            if armed is not None and armed.fired:
                _set_async_exc(armed.thread_id, None)

    def _run(self) -> None:
        last_busy = time.monotonic()
        with self._cond:
            while True:
                now = time.monotonic()
                if self._armed:
                    last_busy = now
                if not self._armed and now - last_busy > _LINGER_S:
                    self._sleeping = True
                    self._cond.wait()
                    self._sleeping = False
                    continue
                resident = resident_bytes() if any(a.memory is not None for a in self._armed.values()) else None
                for armed in self._armed.values():
                    if armed.fired:
                        continue
                    if now >= armed.deadline:
                        armed.fired = True
                        _set_async_exc(armed.thread_id, Expired)
                    elif armed.memory is not None and resident is not None:
                        if armed.baseline is None:
                            armed.baseline = resident
                        elif resident - armed.baseline > armed.memory:
                            armed.fired = True
                            _set_async_exc(armed.thread_id, OverMemory)
                self._cond.wait(_TICK_S)


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


_WATCHDOG = _Watchdog()


def run_with_deadline(fn: Callable[[], T], seconds: float, memory: int | None = None) -> T:
    """Call `fn`; raise `Expired` if it runs past `seconds` of wall-clock time, `OverMemory` if the process grows by
    more than `memory` bytes meanwhile."""
    key = _WATCHDOG.arm(seconds, memory)
    try:
        try:
            return fn()
        finally:
            _WATCHDOG.disarm(key)
    except Expired:
        # The single injection may have landed inside the inner `finally`; disarming is idempotent.
        _WATCHDOG.disarm(key)
        raise
