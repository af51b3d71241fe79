"""Fixtures shared by test modules."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import settings

PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts"

# Property tests draw the same examples on every run (seeded from a hash of each test
# function), so a failure seen once is seen again; `pytest --hypothesis-profile=explore`
# draws fresh ones (Hypothesis's defaults, whatever profile a CI variable selects).
settings.register_profile("derandomized", derandomize=True, database=None)
settings.register_profile("explore", settings.get_profile("default"))
settings.load_profile("derandomized")


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zoo cache folder with `tiny` built, once per test session (it takes a minute)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from real_backend.zoo import build

    folder = tmp_path_factory.mktemp("zoo")
    build("tiny", cache_dir=folder)
    return folder


@pytest.fixture(scope="session")
def apar_tiny_zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zoo cache folder with `apar-tiny` built, once per test session (minutes)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from real_backend.zoo import build

    folder = tmp_path_factory.mktemp("apar_zoo")
    build("apar-tiny", cache_dir=folder)
    return folder


@pytest.fixture(scope="session")
def tiny_predictor(tiny_zoo: Path) -> Path:
    """A length predictor for the zoo `tiny`, trained small and quick, in its default folder
    (`<zoo>/tiny/length_predictor`, where `{kind: learned}` finds it), once per session."""
    from workbench.cli import main

    code = main(
        ["predictor", "train", "--model-zoo", "tiny", "--zoo-dir", str(tiny_zoo),
         "--prompts", str(PROMPTS / "mt_bench.jsonl"), "--code-snippets", "40",
         "--max-new", "64", "--json"]
    )  # fmt: skip
    assert code == 0
    return tiny_zoo / "tiny" / "length_predictor"


# The decoder tests' shared target model, workload and vanilla outputs (greedy, so the
# outputs do not depend on how wall-clock arrivals interleave with steps).


@pytest.fixture(scope="session")
def decoder_target():
    pytest.importorskip("torch")
    from decoder_models import DECODER_VOCAB, random_model

    return random_model(DECODER_VOCAB, seed=0)


@pytest.fixture(scope="session")
def decoder_workload():
    pytest.importorskip("torch")
    from decoder_models import DECODER_VOCAB, interleaved_workload

    return interleaved_workload(16, DECODER_VOCAB)


@pytest.fixture(scope="session")
def decoder_vanilla(decoder_target, decoder_workload):
    from decoder_models import one_thread, serve

    with contextlib.contextmanager(one_thread)():
        return serve(decoder_target, decoder_workload)[2]
