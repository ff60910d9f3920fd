"""Every environment variable chatcaps reads and every default path it uses, resolved here and nowhere else.

    CHATCAPS_CACHE_DIR     where `detect_caps` caches Caps on disk; empty: no disk cache
                           (default `$XDG_CACHE_HOME/chatcaps/caps`, else `~/.cache/chatcaps/caps`)
    CHATCAPS_ZOO           the template zoo folder (default `templates_cache/zoo`, see `chatcaps.zoo`)
    CHATCAPS_BUILD_CACHE   where the development builds are kept (llama-server, llama-cpp-python, the tiny test
                           model; default `~/.cache/chatcaps`, as in scripts/build_llama_server.sh)
    HF_HUB_OFFLINE         also TRANSFORMERS_OFFLINE: read the Hugging Face cache only, as huggingface_hub does

Each is read when it is asked for, not at import, so a process (or a test) that sets one later is obeyed. Read
elsewhere, and not configuration: `COLUMNS` (the CLI's table width off a terminal, as rich reads it) and the few
variables a minijinja worker process inherits (`engines/isolation.py` copies them, so that it has no others).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "CHATCAPS_CACHE_DIR"
ZOO_ENV = "CHATCAPS_ZOO"
BUILD_CACHE_ENV = "CHATCAPS_BUILD_CACHE"
HF_OFFLINE_ENVS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
XDG_CACHE_ENV = "XDG_CACHE_HOME"

ZOO_DEFAULT = Path("templates_cache") / "zoo"
"""The zoo's place relative to the working directory or the source checkout: a development data set."""
_TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})
"""huggingface_hub/constants.py ENV_VARS_TRUE_VALUES."""


def user_cache_dir() -> Path:
    """chatcaps' folder in the user cache: `$XDG_CACHE_HOME/chatcaps`, else `~/.cache/chatcaps`."""
    return Path(os.environ.get(XDG_CACHE_ENV) or Path.home() / ".cache") / "chatcaps"


def cache_dir() -> Path | None:
    """Where `detect_caps` keeps Caps on disk, or None when `CHATCAPS_CACHE_DIR` is set empty (no disk cache)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured is None:
        return user_cache_dir() / "caps"
    return Path(configured) if configured else None


def zoo_setting() -> Path | None:
    """The zoo folder `CHATCAPS_ZOO` names, or None when it is unset or empty."""
    configured = os.environ.get(ZOO_ENV)
    return Path(configured) if configured else None


def build_cache_dir() -> Path:
    """Where development builds are cached: `CHATCAPS_BUILD_CACHE`, else `~/.cache/chatcaps`."""
    return Path(os.environ.get(BUILD_CACHE_ENV) or Path.home() / ".cache" / "chatcaps")


def hf_offline() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is on now; huggingface_hub itself reads it once, at import."""
    hub, transformers = (os.environ.get(name) for name in HF_OFFLINE_ENVS)
    return (hub or transformers or "").upper() in _TRUE_VALUES
