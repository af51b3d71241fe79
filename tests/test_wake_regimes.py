"""`benchmarks/wake_regimes.py`: trains of requests that each wake the engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from real_backend.model.loading import load_checkpoint
from real_backend.serve import DTYPES, eos_token_ids

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from wake_regimes import TRAIN_REQUESTS, Trains, table, wake_extras


def test_every_request_after_the_first_wakes_the_engine_whatever_it_decodes(
    tiny_zoo: Path,
) -> None:
    folder = tiny_zoo / "tiny" / "target"
    model = load_checkpoint(folder, DTYPES["fp32"], "cpu")
    trains = Trains(model, set(eos_token_ids(folder)))
    # 20 ms of thinking: the engine's own work after a request ends (a few ms on a loaded
    # machine) must not outlast it, or the next arrival finds it awake (a flake at 2 ms).
    base, extras = wake_extras(trains, idle_ms=20.0, outputs=[2, 16], rounds=1, pause_s=0.0)
    assert base > 0.0 and set(extras) == {2, 16}
    assert all(e.shape == (TRAIN_REQUESTS - 1,) for e in extras.values())
    text = table(20.0, base, extras, 1)
    assert len(text.splitlines()) == 3 and "16 output tokens" in text
