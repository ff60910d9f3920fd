"""Shared fixtures: the zoo (skipped with one clear line when absent), the canonical contexts, and the tiny trained
model with its tokenizer."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub is imported: it reads this once
os.environ["CHATCAPS_CACHE_DIR"] = ""  # tests probe afresh; test_detect.py turns the disk cache on where it tests it

import pytest

from chatcaps.contexts import Context, load_contexts
from chatcaps.errors import SourceError
from chatcaps.zoo import ZooTemplate, load_zoo

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def _find_zoo() -> tuple[tuple[ZooTemplate, ...], str]:
    try:
        return load_zoo(), ""
    except SourceError as error:
        return (), str(error)


_ZOO, NO_ZOO = _find_zoo()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`zoo_template` parametrises a test over every zoo template, or skips it once with how to get the zoo."""
    if "zoo_template" in metafunc.fixturenames:
        if _ZOO:
            metafunc.parametrize("zoo_template", _ZOO, ids=[template.file for template in _ZOO])
        else:
            metafunc.parametrize("zoo_template", [pytest.param(None, marks=pytest.mark.skip(reason=NO_ZOO))])


@pytest.fixture(scope="session")
def zoo() -> tuple[ZooTemplate, ...]:
    if not _ZOO:
        pytest.skip(NO_ZOO)
    return _ZOO


@pytest.fixture(scope="session")
def contexts() -> tuple[Context, ...]:
    return load_contexts()


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerBase:
    """The tiny trained model's tokenizer (tests/tiny_model.py), loaded once."""
    from tiny_model import tiny_model_dir
    from transformers import AutoTokenizer

    loaded: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(tiny_model_dir())
    return loaded


@pytest.fixture(scope="session")
def model() -> PreTrainedModel:
    """The tiny trained model (tests/tiny_model.py) in eval mode, loaded once."""
    from tiny_model import tiny_model_dir
    from transformers import AutoModelForCausalLM

    loaded: PreTrainedModel = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
    loaded.eval()  # type: ignore[no-untyped-call]  # transformers leaves PreTrainedModel.eval unannotated
    return loaded
