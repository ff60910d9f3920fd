"""A wall-clock bound for pure-Python work (jinja2 renders) without a thread or a process per render.

One daemon thread watches armed deadlines and, when one passes, raises `Expired` inside the thread that armed it
(`PyThreadState_SetAsyncExc`). The exception lands at the next bytecode boundary, which for jinja2 is at most one
loop iteration away; long single C calls (a huge `*`) are bounded separately by the sandbox hooks.

The exception is injected at most once per deadline and any pending one is withdrawn when the deadline is disarmed,
so a render that finished in time never sees it.
"""

from __future__ import annotations

import ctypes
import itertools
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


class Expired(BaseException):
    """Raised inside a render whose deadline passed; a BaseException, so no `except Exception` on the way eats it."""


@dataclass
class _Armed:
    thread_id: int
    deadline: float
    fired: bool = field(default=False)


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed: dict[int, _Armed] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None
        self._sleeping = False

    def arm(self, seconds: float) -> int:
        with self._cond:
            key = next(self._keys)
            self._armed[key] = _Armed(threading.get_ident(), time.monotonic() + seconds)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="chatcaps-watchdog", daemon=True)
                self._thread.start()
            elif self._sleeping:
                self._cond.notify()
            return key

    def disarm(self, key: int) -> None:
        with self._cond:
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
                for armed in self._armed.values():
                    if not armed.fired and now >= armed.deadline:
                        armed.fired = True
                        _set_async_exc(armed.thread_id, Expired)
                self._cond.wait(_TICK_S)


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


_WATCHDOG = _Watchdog()


def run_with_deadline(fn: Callable[[], T], seconds: float) -> T:
    """Call `fn`; raise `Expired` if it runs past `seconds` of wall-clock time."""
    key = _WATCHDOG.arm(seconds)
    try:
        try:
            return fn()
        finally:
            _WATCHDOG.disarm(key)
    except Expired:
        # The single injection may have landed inside the inner `finally`; disarming is idempotent.
        _WATCHDOG.disarm(key)
        raise
