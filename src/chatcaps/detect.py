"""`detect_caps`: a template's Caps, probed once and then served from memory or from disk.

The cache key is the template's sha256, bos/eos, the engine and the chatcaps version — where the version includes a
digest of the probe code and data, so a changed detector never serves stale Caps. On disk each entry is one JSON file
in `chatcaps.constants.cache_dir()` (`CHATCAPS_CACHE_DIR`, default `~/.cache/chatcaps/caps`), written to a temporary
file and renamed into place: concurrent processes may race to write the same entry, and every reader sees a whole file.
An unreadable entry is probed again; an unwritable folder only costs the disk cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import replace
from functools import cache, lru_cache
from importlib import metadata, resources
from pathlib import Path

from chatcaps.caps import Caps
from chatcaps.constants import cache_dir
from chatcaps.engines import DEFAULT_LIMITS, EngineName, Limits, compile_template
from chatcaps.probes import probe_caps
from chatcaps.sources import TemplateSource


def detect_caps(
    template: str | TemplateSource,
    *,
    bos_token: str = "",
    eos_token: str = "",
    engine: EngineName = "jinja2",
    limits: Limits = DEFAULT_LIMITS,
) -> Caps:
    """Every capability of `template`, found by rendering probe conversations.

    A probe the template fails is a result (in `probe_errors`). A probe that hits a sandbox limit stops detection
    at once with `RenderLimitError` naming the limit and the probe: a template that exhausts a limit on a small probe
    conversation is not one to serve. So does spending `limits.detect_time_s` over all the probes (`limit` is
    "detect_time_s"). A detection cut short is cached nowhere. A template that does not parse raises
    `TemplateSyntaxError` with its line and column, named as its `TemplateSource` is (plain text: "<template>").
    """
    if isinstance(template, str):  # no TemplateSource built on the way to the cache: warm lookups are per request
        return _detect(template, "<template>", bos_token, eos_token, engine, limits)
    return _detect(template.text, template.name, bos_token, eos_token, engine, limits)


@lru_cache(maxsize=1024)
def _detect(text: str, name: str, bos_token: str, eos_token: str, engine: EngineName, limits: Limits) -> Caps:
    sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    path = _cache_path(sha256, bos_token, eos_token, engine)
    if path is not None and path.is_file():
        try:
            return Caps.from_json(path.read_bytes())
        except (OSError, ValueError, KeyError, TypeError):
            pass
    renderer = compile_template(text, engine=engine, name=name, limits=limits)
    caps = replace(probe_caps(renderer, bos_token=bos_token, eos_token=eos_token), template_sha256=sha256)
    if path is not None:
        _write(path, caps.to_json())
    return caps


def cache_version() -> str:
    """chatcaps' version plus a digest of everything that decides Caps: the probes, their data, the schema and the
    words they share (`vocab`: `state_of`, the call shapes' placeholders)."""
    return f"{metadata.version('chatcaps')}+{_probe_digest()[:12]}"


@cache
def _probe_digest() -> str:
    digest = hashlib.sha256()
    package = resources.files("chatcaps")
    files = [
        package / "caps.py",
        package / "vocab.py",
        *sorted(package.joinpath("probes").iterdir(), key=lambda entry: entry.name),
    ]
    for entry in files:
        if entry.is_file() and entry.name.endswith((".py", ".json")):
            digest.update(entry.name.encode() + b"\0" + entry.read_bytes())
    return digest.hexdigest()


def _cache_path(sha256: str, bos_token: str, eos_token: str, engine: str) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = hashlib.sha256("\0".join([sha256, bos_token, eos_token, engine, cache_version()]).encode()).hexdigest()
    return folder / f"{sha256[:16]}-{engine}-{key[:16]}.json"


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", suffix=".json", delete=False) as handle:
            handle.write(data)
        os.replace(handle.name, path)
    except OSError:
        return
