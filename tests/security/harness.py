"""Running the hostile-template data: the escape corpus in-process, each exhaustion case in a child process.

Shared by the tests in this folder and scripts/security_report.py. An exhaustion case runs in a fresh Python process
(`python harness.py ENGINE CASE`) with its address space capped at `CHILD_MEMORY_CAP`, so a case that would take the
machine's memory (or abort the process, as minijinja does when an allocation fails) ends there and is reported
as "crash". The child measures the render alone: wall time and peak resident memory (the kernel's high-water mark,
reset just before the render), so Python's and Rust's allocations both count.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from chatcaps.engines import EngineName, Limits

HERE = Path(__file__).resolve().parent
PAYLOADS = json.loads((HERE / "payloads.json").read_text(encoding="utf-8"))
EXHAUSTION = json.loads((HERE / "exhaustion.json").read_text(encoding="utf-8"))

SETUPS = ("jinja2", "minijinja", "minijinja-isolated")
"""How a case is run: jinja2; minijinja in-process (`Limits(isolate=False)`, the opt-in for vetted templates); or
minijinja in a capped worker (`Limits(isolate=True)`, its default)."""


def configure(setup: str) -> tuple[EngineName, Limits]:
    """The engine and the default `Limits` of a setup, `isolate` set either way."""
    from chatcaps import Limits

    return cast("EngineName", setup.removesuffix("-isolated")), Limits(isolate=setup.endswith("-isolated"))


CHILD_MEMORY_CAP = 4 * 1024**3
"""Address-space cap of a child process: above any bounded case's peak, below what would hurt the machine."""
CRASH_MEMORY_CAP = 1024**3
"""The cap for a case expected to crash (an unbounded one): it fails the first large allocation sooner."""
CRASH_CPU_S = 5
"""CPU seconds a case expected to crash may use before the kernel kills its child (`RLIMIT_CPU`): an unbounded case
that grows slowly (minijinja building 2^33 list items, or copying an input string at every lookup) ends there as
"crash" rather than running for minutes. Other children are not capped: their own bounds end them."""
CANARY_ENV = ("CHATCAPS_SECURITY_CANARY", "canary-env-7f3a9c")
CANARY_FILE_TEXT = "canary-file-91c2e4"
LEAK_MARKERS = ("<class ", " at 0x", "<function ", "<built-in ", "<bound method", "<module ", "<generator ")
"""What Python's repr of an internal object looks like; none may reach a prompt."""


def plant_canaries(folder: Path) -> Path:
    """Put a secret in the environment and one in a file; a payload that prints either escaped the sandbox."""
    os.environ[CANARY_ENV[0]] = CANARY_ENV[1]
    path = folder / "canary.txt"
    path.write_text(CANARY_FILE_TEXT, encoding="utf-8")
    return path


def payload_source(payload: dict[str, Any], canary_file: Path) -> str:
    return str(payload["template"]).replace("{canary_file}", str(canary_file))


def leaks(text: str) -> list[str]:
    """The markers of Python internals or planted secrets found in `text`."""
    markers = (*LEAK_MARKERS, CANARY_ENV[1], CANARY_FILE_TEXT, "uid=", "injected")
    return [marker for marker in markers if marker in text]


def short_conversation() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}]


def build_input(name: str) -> dict[str, Any]:
    """The messages (and tools) a case renders: small, or one of the sizes the issue names."""
    if name == "short":
        return {"messages": short_conversation(), "tools": None}
    if name == "message_10mb":
        text = "The quick brown fox jumps over the lazy dog. " * 222_223  # 10,000,035 characters
        return {"messages": [{"role": "user", "content": text[:10_000_000]}], "tools": None}
    if name == "messages_10k":
        turns = [
            {"role": "user" if index % 2 == 0 else "assistant", "content": f"Message number {index}: hello there."}
            for index in range(10_000)
        ]
        return {"messages": turns, "tools": None}
    if name == "deep_json":
        return {"messages": [{"role": "user", "content": nested(100_000)}], "tools": None}
    if name == "deep_tool_arguments":
        call: dict[str, Any] = {
            "id": "call00001",
            "type": "function",
            "function": {"name": "lookup", "arguments": nested(100_000)},
        }
        tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
        messages = [
            {"role": "user", "content": "Look it up"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call00001", "content": "found"},
        ]
        return {"messages": messages, "tools": [tool]}
    raise ValueError(f"unknown input {name!r}")


def nested(depth: int, kind: str = "dict") -> Any:
    """A value `depth` dicts (or lists) deep: past Python's recursion limit for any naive walk."""
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


@dataclass(frozen=True)
class Measurement:
    """How one exhaustion case ended in one setup."""

    case: str
    setup: str
    outcome: str
    """"ok", "limit:<Limits field>", "error:<chatcaps error class>", "crash" (the process died: an abort, or killed
    at `CRASH_CPU_S`), "hang" (killed after the timeout) or "exception:<type>" (anything else: a bug)."""
    seconds: float
    peak_mb: float
    """Peak resident memory during the render, above the resident memory just before it."""
    detail: str
    cpu_seconds: float | None = None
    """CPU time the render used, in this process and in the workers it reaped (None where the child did not say)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def expected(case: dict[str, Any], setup: str) -> list[str]:
    """The outcomes documented for a case in a setup (a memory case may run out of time first on a slow machine)."""
    outcomes = case["expect"][setup]
    return outcomes if isinstance(outcomes, list) else [outcomes]


def acceptable(outcome: str, case: dict[str, Any], setup: str) -> bool:
    """Whether `outcome` keeps the property that matters: the case ends as documented, or, on minijinja, as any
    chatcaps limit error where the data documents a limit or the engine's abort.

    Which of its own limits minijinja trips first moves between releases (3.1 charges fuel for large values, so a
    string that 3.0 built up to chatcaps' operand check, or that aborted the process, now runs out of fuel within
    milliseconds). A release that stops a case earlier, as a `RenderLimitError`, is no regression; an abort is
    accepted only where it is documented, and the time and memory bounds hold for every outcome but an abort.
    """
    documented = expected(case, setup)
    if outcome in documented:
        return True
    limits_only = all(item == "crash" or item.startswith("limit:") for item in documented)
    return setup.startswith("minijinja") and outcome.startswith("limit:") and limits_only


def run_case(case: dict[str, Any], setup: str, time_s: float | None = None, timeout: float = 60) -> Measurement:
    """Run one exhaustion case in a child process and read its measurement."""
    crash = expected(case, setup) == ["crash"]
    cap = CRASH_MEMORY_CAP if crash else CHILD_MEMORY_CAP
    command = [sys.executable, str(Path(__file__)), setup, case["name"], str(cap), str(CRASH_CPU_S if crash else 0)]
    if time_s is not None:
        command.append(str(time_s))
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Measurement(case["name"], setup, "hang", time.perf_counter() - started, 0.0, f"killed after {timeout}s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [""])[0][:200]
        return Measurement(
            case["name"], setup, "crash", time.perf_counter() - started, 0.0, f"exit {done.returncode}: {tail}"
        )
    return Measurement(**json.loads(lines[-1]))


def _peak_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass


def _peak_bytes() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _children_peak_bytes() -> int:
    """The largest peak resident memory of the reaped child processes (isolated minijinja workers); 0 if none."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _child(setup: str, name: str, time_s: float | None) -> Measurement:
    from chatcaps import ChatcapsError, ChatTemplate, RenderLimitError
    from chatcaps.engines import compile_template
    from chatcaps.engines.isolation import POOL
    from chatcaps.engines.watchdog import resident_bytes
    from chatcaps.zoo import load_zoo

    case = next(case for case in EXHAUSTION if case["name"] == name)
    engine, limits = configure(setup)
    if time_s is not None:
        limits = replace(limits, time_s=time_s)
    inputs = build_input(case["input"])
    source: str = case["template"]
    if source.startswith("zoo:"):
        found = next(item for item in load_zoo() if item.file == source.removeprefix("zoo:"))
        template = ChatTemplate(
            found.read(), bos_token=found.bos_token, eos_token=found.eos_token, engine=engine, limits=limits
        )
        template.caps  # noqa: B018 - detected before the clock starts: the case measures one render

        def render() -> object:
            return template.render(inputs["messages"], tools=inputs["tools"])
    else:
        renderer = compile_template(source, engine=engine, limits=limits)

        def render() -> object:
            return renderer.render({**inputs, "add_generation_prompt": True})

    if limits.isolate:  # start a worker before the clock: a server's pool is warm
        compile_template("{{ 1 }}", engine=engine, limits=limits).render({})
    before = resident_bytes() or 0  # None only without /proc and resource, and this harness needs resource
    _peak_reset()
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        render()
        outcome, detail = "ok", ""
    except RenderLimitError as error:
        outcome, detail = f"limit:{error.limit}", str(error)
    except ChatcapsError as error:
        outcome, detail = f"error:{type(error).__name__}", str(error)
    except Exception as error:
        outcome, detail = f"exception:{type(error).__name__}", str(error)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    peak = max(_peak_bytes() - before, 0)
    POOL.close()  # reaps the workers, so their peak is in RUSAGE_CHILDREN: counted whole, start-up included
    peak += _children_peak_bytes()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu += workers.ru_utime + workers.ru_stime
    return Measurement(name, setup, outcome, round(seconds, 3), round(peak / 1024**2, 1), detail[:200], round(cpu, 3))


def main() -> None:
    """`python harness.py SETUP CASE MEMORY_CAP CPU_CAP [TIME_S]`: run one case (CPU_CAP 0: uncapped), print its
    Measurement as JSON."""
    setup, name, cap, cpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    time_s = float(sys.argv[5]) if len(sys.argv) > 5 else None
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    if cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    print(json.dumps(_child(setup, name, time_s).to_dict()), flush=True)


if __name__ == "__main__":
    main()
