"""`benchmarks/apar_speed.py`'s counting helpers on hand-made answers and records."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from apar_speed import list_items, lived_steps, looping_lines


def test_list_items_counts_numbered_lines_at_a_line_start_only() -> None:
    text = "1. `dumps`: Serialize.\n2. `loads`: Parse.\nsee 3. below\n10. `x`: y"
    assert list_items(text) == 3


def test_a_line_loops_when_a_run_of_words_recurs_three_times() -> None:
    texts = [
        "1. `a`: the 'path' to the 'path' to the 'path' to the end\n2. `b`: fine",
        "\n1. `c`: a b c a b c d\n",  # twice only
    ]
    assert looping_lines(texts) == "1 of 3"
    assert looping_lines(texts, times=2) == "2 of 3"


def test_lived_steps_counts_the_whole_steps_between_arrival_and_finish() -> None:
    start = np.array([3.0, 0.0, 1.0, 2.0, 4.0])  # unordered: the helper sorts by start
    steps = SimpleNamespace(start_s=start, duration_s=np.ones(5))
    requests = SimpleNamespace(
        arrival_s=np.array([0.0, 0.5, 1.0]),
        finish_s=np.array([2.0, 5.0, 4.0]),  # steps 0-1; 1-4 (ends at 2..5); 1-3
    )
    records = SimpleNamespace(steps=steps, requests=requests)
    # counts 2, 4, 3: median 3, 99th percentile 3.98; E2E per step 1.0, 1.125, 1.0 s
    assert lived_steps(records) == f"3 / 4 | {(1.0 + 1.125 + 1.0) / 3 * 1e3:.2f}"
