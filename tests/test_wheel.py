"""chatcaps works anywhere: on a Python without the POSIX `resource` module (Windows), and installed from its wheel
into a fresh virtual environment, run from outside the checkout."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from chatcaps import InputError, Limits
from chatcaps.engines import compile_template, watchdog
from chatcaps.engines.watchdog import OverMemory, run_with_deadline

NO_RESOURCE = "import sys; sys.modules['resource'] = None  # as on Windows: `import resource` raises ImportError\n"
PLAIN = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"


def test_chatcaps_imports_and_renders_without_the_resource_module() -> None:
    program = NO_RESOURCE + (
        "import json\n"
        "import chatcaps, chatcaps.cli\n"
        "from chatcaps import ChatTemplate, InputError, Limits\n"
        f"source = {PLAIN!r}\n"
        "prompts = [ChatTemplate(source, engine=engine).render([{'role': 'user', 'content': 'hi'}]).prompt\n"
        "           for engine in ('jinja2', 'minijinja')]\n"
        "try:\n"
        "    ChatTemplate(source, engine='minijinja', limits=Limits(isolate=True))\n"
        "    refused = None\n"
        "except InputError as error:\n"
        "    refused = str(error)\n"
        "print(json.dumps({'prompts': prompts, 'isolate': refused, 'resource': sys.modules['resource']}))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "prompts": ["<user>hi", "<user>hi"],
        "isolate": "Limits(isolate=True) needs a POSIX system (Python's `resource` module is missing here): "
        "use isolate=False or the jinja2 engine, whose renders are bounded in-process",
        "resource": None,
    }


def _grow() -> int:
    """Sampled once idle, then 64 MiB more: past a 1-byte memory budget from the watchdog's first sample on."""
    time.sleep(0.1)
    grown = b"x" * (64 * 1024**2)
    time.sleep(0.2)
    return len(grown)


def test_the_memory_budget_holds_where_memory_can_be_read() -> None:
    with pytest.raises(OverMemory):
        run_with_deadline(_grow, 5.0, memory=1)


def test_without_proc_or_resource_the_memory_budget_is_not_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "_STATM", "/nonexistent/statm")
    monkeypatch.setitem(sys.modules, "resource", None)
    assert watchdog.resident_bytes() is None
    assert run_with_deadline(_grow, 5.0, memory=1) == 64 * 1024**2


def test_isolation_is_refused_without_the_resource_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "resource", None)
    with pytest.raises(InputError, match="needs a POSIX system"):
        compile_template("{{ 'refused without resource' }}", engine="minijinja", limits=Limits(isolate=True))
