"""Where chatcaps keeps things, from the environment read at call time: the detection cache never lands in the cwd."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chatcaps import constants, detect_caps


def _detect_unique(tmp_path: Path) -> None:
    """A detection of a template no other test has detected, so the memory cache cannot answer it."""
    detect_caps(f"{{# {tmp_path} #}}{{% for m in messages %}}<{{{{ m.role }}}}>{{{{ m.content }}}}{{% endfor %}}")


def test_detection_cache_lives_in_the_user_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv(constants.CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _detect_unique(tmp_path)
    (entry,) = (tmp_path / "xdg" / "chatcaps" / "caps").iterdir()
    assert entry.suffix == ".json"
    assert os.listdir(cwd) == []


def test_without_xdg_the_cache_is_under_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(constants.CACHE_DIR_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert constants.cache_dir() == tmp_path / ".cache" / "chatcaps" / "caps"


def test_cache_dir_variable_names_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(constants.CACHE_DIR_ENV, str(tmp_path / "caps"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _detect_unique(tmp_path)
    assert len(os.listdir(tmp_path / "caps")) == 1
    assert not (tmp_path / "xdg").exists()


def test_an_empty_cache_dir_variable_turns_the_disk_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(constants.CACHE_DIR_ENV, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert constants.cache_dir() is None
    _detect_unique(tmp_path)
    assert os.listdir(tmp_path) == []


def test_build_cache_defaults_to_the_home_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(constants.BUILD_CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert constants.build_cache_dir() == tmp_path / ".cache" / "chatcaps"
    monkeypatch.setenv(constants.BUILD_CACHE_ENV, str(tmp_path / "builds"))
    assert constants.build_cache_dir() == tmp_path / "builds"


@pytest.mark.parametrize(
    ("hub", "transformers", "offline"),
    [
        ("1", None, True),
        ("yes", None, True),
        ("0", None, False),
        (None, "TRUE", True),
        ("0", "1", False),  # the first one set decides
        ("", "on", True),
    ],
)
def test_hf_offline_reads_the_hubs_variables_as_huggingface_hub_does(
    hub: str | None, transformers: str | None, offline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in zip(constants.HF_OFFLINE_ENVS, (hub, transformers), strict=True):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert constants.hf_offline() is offline


def test_zoo_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(constants.ZOO_ENV, str(tmp_path))
    assert constants.zoo_setting() == tmp_path
    monkeypatch.setenv(constants.ZOO_ENV, "")
    assert constants.zoo_setting() is None
