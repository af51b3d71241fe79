"""Trace rows over a context limit: cut the prompt, cut both in proportion (Vidur), or drop
the row (issue 17)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.scenario.workload import TraceLengths
from workbench.workload.generate import fit_total, trace_lengths

ROWS = "num_prefill_tokens,num_decode_tokens\n100,50\n300,100\n90,10\n4000,200\n"


def _trace(tmp_path: Path, **fields: object) -> TraceLengths:
    path = tmp_path / "t.csv"
    path.write_text(ROWS)
    return TraceLengths(path=path, max_total_tokens=200, **fields)


def test_proportional_cuts_each_side_by_its_share_rounded_up() -> None:
    prompt, output = fit_total(
        np.array([100, 300, 90, 4000]), np.array([50, 100, 10, 200]), 200, "proportional"
    )
    # 300 + 100 is 200 over: the prompt gives ceil(200 · 0.75) = 150, the output 50.
    # 4000 + 200 is 4000 over: ceil(4000 · 4000/4200) = 3810 and ceil(4000 · 200/4200) = 191.
    assert prompt.tolist() == [100, 150, 90, 190]
    assert output.tolist() == [50, 50, 10, 9]


def test_proportional_keeps_at_least_one_token_each() -> None:
    prompt, output = fit_total(np.array([5000]), np.array([1]), 100, "proportional")
    assert (prompt.tolist(), output.tolist()) == ([99], [1])  # 4901 · 5000/5001 rounds up


def test_clip_prompt_keeps_the_output() -> None:
    prompt, output = fit_total(np.array([300, 10]), np.array([100, 500]), 200, "clip_prompt")
    assert prompt.tolist() == [100, 1]
    assert output.tolist() == [100, 199]  # an output over the limit leaves one prompt token


def test_rows_over_the_limit_can_be_dropped(tmp_path: Path) -> None:
    prompt, output = trace_lengths(_trace(tmp_path, over_total="drop"), 4, seed=0)
    assert prompt is not None
    assert prompt.tolist() == [100, 90, 100, 90]  # rows 0 and 2, wrapping around
    assert output.tolist() == [50, 10, 50, 10]


def test_the_limit_applies_to_the_requests(tmp_path: Path) -> None:
    prompt, output = trace_lengths(_trace(tmp_path, over_total="proportional"), 4, seed=0)
    assert prompt is not None
    assert (prompt + output).max() <= 200
    assert prompt.tolist() == [100, 150, 90, 190]


def test_dropping_every_row_is_an_error(tmp_path: Path) -> None:
    config = _trace(tmp_path, over_total="drop").model_copy(update={"max_total_tokens": 50})
    with pytest.raises(WorkbenchError, match="no row fits max_total_tokens=50"):
        trace_lengths(config, 4, seed=0)


def test_a_total_limit_needs_prompt_lengths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a prompt_column"):
        TraceLengths(path=tmp_path / "t.csv", prompt_column=None, max_total_tokens=200)


def test_lengths_scale_before_the_clips(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(ROWS)
    config = TraceLengths(path=path, prompt_scale=1.5, output_scale=0.01, max_prompt_tokens=5000)
    prompt, output = trace_lengths(config, 4, seed=0)
    assert prompt is not None
    assert prompt.tolist() == [150, 450, 135, 5000]  # 4000 × 1.5 = 6000, clipped
    assert output.tolist() == [1, 1, 1, 2]  # at least one token
