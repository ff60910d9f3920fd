"""chatcaps works anywhere: on a Python without the POSIX `resource` module (Windows), and installed from its wheel
into a fresh virtual environment, run from outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from chatcaps import InputError, Limits, detect_caps
from chatcaps.engines import compile_template, watchdog
from chatcaps.engines.watchdog import OverMemory, run_with_deadline
from chatcaps.web.site import ASSETS

ROOT = Path(__file__).resolve().parents[1]
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


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """chatcaps' wheel, built offline from a copy of the sources (a build writes into the tree it builds)."""
    tree = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", tree)
    shutil.copy(ROOT / "README.md", tree)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp_path_factory.mktemp("dist")
    pip_wheel = ("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", ".", "-w", dist)
    _run(sys.executable, *pip_wheel, cwd=tree)
    (built,) = dist.glob("chatcaps-*.whl")
    return built


def test_the_wheel_ships_the_contexts_the_probes_and_the_pages(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "src" / "chatcaps"
    for folder in ("contexts", "probes"):
        shipped = {name for name in names if name.startswith(f"chatcaps/{folder}/") and not name.endswith(".py")}
        on_disk = {f"chatcaps/{folder}/{path.name}" for path in (package / folder).glob("*.json")}
        assert shipped == on_disk | ({"chatcaps/contexts/README.md"} if folder == "contexts" else set())
    for folder in ("web/templates", "web/static"):
        shipped = {name for name in names if name.startswith(f"chatcaps/{folder}/")}
        assert shipped == {f"chatcaps/{folder}/{path.name}" for path in (package / folder).iterdir() if path.is_file()}
    site = {f"chatcaps/web/static/{name}" for name in ASSETS}
    site |= {f"chatcaps/web/templates/site_{page}.html" for page in ("base", "index", "template")}
    assert site <= names
    assert "chatcaps/py.typed" in names


def test_the_wheel_ships_the_playground_page(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    page = {"templates/playground.html", "static/base.css", "static/playground.css", "static/playground.js"}
    assert {f"chatcaps/web/{name}" for name in page} <= names


def test_the_installed_wheel_works_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """Installed into a fresh venv whose dependencies are this venv's packages (a plain path in a .pth, which does
    not run this venv's own .pth files: its editable chatcaps stays out), run from a folder outside the checkout."""
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(
        sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel, cwd=tmp_path
    )
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip())
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in ours), encoding="utf-8")

    outside = tmp_path / "work"
    outside.mkdir()
    template = outside / "plain.jinja"
    template.write_text(PLAIN, encoding="utf-8")
    (outside / "messages.json").write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTHON", "CHATCAPS_"))}
    env |= {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    chatcaps = venv / "bin" / "chatcaps"

    where = _run(python, "-c", "import chatcaps; print(chatcaps.__file__)", cwd=outside, env=env).strip()
    assert Path(where).is_relative_to(venv)
    assert json.loads(_run(chatcaps, "detect", "plain.jinja", "--json", cwd=outside, env=env)) == json.loads(
        detect_caps(PLAIN).to_json()
    )
    assert len(list((tmp_path / "cache" / "chatcaps" / "caps").glob("*.json"))) == 1
    assert _run(chatcaps, "render", "plain.jinja", "--messages", "messages.json", cwd=outside, env=env) == "<user>hi\n"
    count = sum(
        name.startswith("chatcaps/contexts/") and name.endswith(".json") for name in zipfile.ZipFile(wheel).namelist()
    )
    assert count == len(list((ROOT / "src" / "chatcaps" / "contexts").glob("*.json")))
    assert _run(chatcaps, "diff", "plain.jinja", cwd=outside, env=env) == (
        f"plain.jinja: jinja2 vs minijinja on {count} contexts\nraw: {count} agree\npolyfills: {count} agree\n"
    )
    assert sorted(path.name for path in outside.iterdir()) == ["messages.json", "plain.jinja"]
    site = tmp_path / "site"
    assert _run(chatcaps, "zoo", outside, "--html", site, cwd=outside, env=env) == (
        f"wrote {site / 'index.html'} and 4 more files (template pages: 1)\n"
    )
    assert sorted(str(path.relative_to(site)) for path in site.rglob("*.*")) == sorted(
        ["index.html", *ASSETS, "t/plain.jinja.html"]
    )
