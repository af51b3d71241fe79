"""The request stream is fixed by (config, seed), component by component; bad files fail clearly."""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.scenario.workload import WorkloadConfig
from workbench.seeding import component_rng, stable_id
from workbench.workload.generate import generate_workload
from workbench.workload.requests import Workload

ROOT = Path(__file__).resolve().parents[1]
CONV_TRACE = ROOT / "data" / "traces" / "splitwise_conv.csv"
ALPACA_JSON = ROOT / "data" / "seqsched" / "alpaca-val-10k-length.json"


def _config(**changes: Any) -> WorkloadConfig:
    data: dict[str, Any] = {
        "num_requests": 2000,
        "arrival": {"kind": "gamma", "rate_per_s": 5.0, "cv": 2.0},
        "prompt_tokens": {"kind": "lognormal", "mean": 800, "std": 600, "max": 4096},
        "output_tokens": {"kind": "empirical", "path": ALPACA_JSON, "column": "L_t0.0"},
    }
    data.update(changes)
    return WorkloadConfig.model_validate(data)


def _trace_config(**lengths: Any) -> WorkloadConfig:
    return WorkloadConfig.model_validate(
        {
            "num_requests": 500,
            "arrival": {"kind": "trace", "path": CONV_TRACE},
            "lengths_from_trace": {"path": CONV_TRACE, **lengths},
        }
    )


def _same(a: Workload, b: Workload) -> bool:
    return (
        np.array_equal(a.arrival_s, b.arrival_s, equal_nan=True)
        and np.array_equal(a.prompt_tokens, b.prompt_tokens)
        and np.array_equal(a.output_tokens, b.output_tokens)
    )


def _digest(w: Workload) -> str:
    arrays = (w.arrival_s, w.prompt_tokens, w.output_tokens)
    return hashlib.sha256(b"".join(a.tobytes() for a in arrays)).hexdigest()


# ------------------------------------------------------------------ reproducibility


@pytest.mark.parametrize("order", ["sequential", "shuffle"])
def test_same_config_and_seed_give_identical_arrays(order: str) -> None:
    assert _same(generate_workload(_config(), 11), generate_workload(_config(), 11))
    trace = _trace_config(order=order)
    assert _same(generate_workload(trace, 11), generate_workload(trace, 11))


def test_different_seeds_give_different_streams() -> None:
    a, b = generate_workload(_config(), 1), generate_workload(_config(), 2)
    assert not np.array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.output_tokens, b.output_tokens)
    shuffled = _trace_config(order="shuffle")
    c, d = generate_workload(shuffled, 1), generate_workload(shuffled, 2)
    assert not np.array_equal(c.prompt_tokens, d.prompt_tokens)


def test_workload_shape_and_types() -> None:
    w = generate_workload(_config(), 0)
    assert len(w) == 2000 and not w.is_closed_loop
    assert w.arrival_s.dtype == np.float64 and w.prompt_tokens.dtype == np.int64
    assert w.output_tokens.dtype == np.int64
    assert w.prompt_tokens.min() >= 1 and w.output_tokens.min() >= 1
    assert np.all(np.diff(w.arrival_s) >= 0)


def test_stream_does_not_depend_on_the_process_hash_seed() -> None:
    """A fresh interpreter with another PYTHONHASHSEED draws the very same stream."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
        "from test_workload_reproducible import _config, _digest;"
        "from workbench.workload.generate import generate_workload;"
        "print(_digest(generate_workload(_config(), 5)))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT), str(ROOT / "tests")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == _digest(generate_workload(_config(), 5))


def test_component_ids_are_stable() -> None:
    # A hash of the name alone: fixed forever, so seeds mean the same thing in every release.
    assert stable_id("workload.arrival") == stable_id("workload.arrival")
    assert stable_id("workload.arrival") != stable_id("workload.prompt_tokens")
    expected = int.from_bytes(
        hashlib.blake2b(b"workload.arrival", digest_size=8).digest(), "little"
    )
    assert stable_id("workload.arrival") == expected
    a, b = component_rng(3, "x").random(4), component_rng(3, "y").random(4)
    assert not np.array_equal(a, b)
    assert np.array_equal(a, component_rng(3, "x").random(4))


# ------------------------------------------------------------------ component independence


def test_changing_output_lengths_leaves_arrivals_and_prompts_alone() -> None:
    base = generate_workload(_config(), 9)
    other = generate_workload(
        _config(output_tokens={"kind": "normal", "mean": 300, "std": 50, "min": 10}), 9
    )
    assert np.array_equal(base.arrival_s, other.arrival_s)
    assert np.array_equal(base.prompt_tokens, other.prompt_tokens)
    assert not np.array_equal(base.output_tokens, other.output_tokens)


def test_changing_arrivals_or_prompts_leaves_the_other_components_alone() -> None:
    base = generate_workload(_config(), 9)
    poisson = generate_workload(_config(arrival={"kind": "poisson", "rate_per_s": 1.0}), 9)
    assert np.array_equal(base.prompt_tokens, poisson.prompt_tokens)
    assert np.array_equal(base.output_tokens, poisson.output_tokens)
    uniform = generate_workload(_config(prompt_tokens={"kind": "uniform", "low": 1, "high": 9}), 9)
    assert np.array_equal(base.arrival_s, uniform.arrival_s)
    assert np.array_equal(base.output_tokens, uniform.output_tokens)


# ------------------------------------------------------------------ trace lengths, closed loop


def test_sequential_trace_lengths_follow_the_file_rows_and_wrap() -> None:
    with open(CONV_TRACE, newline="") as fh:
        rows = [
            (int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])) for r in csv.DictReader(fh)
        ]
    config = _trace_config(max_prompt_tokens=2048)
    w = generate_workload(config.model_copy(update={"num_requests": len(rows) + 3}), 0)
    expected = rows + rows[:3]
    assert w.output_tokens.tolist() == [o for _, o in expected]
    assert w.prompt_tokens.tolist() == [min(p, 2048) for p, _ in expected]


def test_shuffled_trace_keeps_prompt_and_output_of_a_row_together() -> None:
    w = generate_workload(_trace_config(order="shuffle"), 4)
    with open(CONV_TRACE, newline="") as fh:
        pairs = {
            (int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])) for r in csv.DictReader(fh)
        }
    assert set(zip(w.prompt_tokens.tolist(), w.output_tokens.tolist(), strict=True)) <= pairs


def test_closed_loop_workload() -> None:
    w = generate_workload(
        _config(arrival={"kind": "closed_loop", "concurrency": 16, "think_time_s": 0.5}), 0
    )
    assert w.is_closed_loop and w.closed_loop_concurrency == 16 and w.think_time_s == 0.5
    assert np.isnan(w.arrival_s).all()


# ------------------------------------------------------------------ bad inputs


def _empirical(path: Path, column: str) -> WorkloadConfig:
    return _config(output_tokens={"kind": "empirical", "path": path, "column": column})


def _error(config: WorkloadConfig) -> str:
    with pytest.raises(WorkbenchError) as err:
        generate_workload(config, 0)
    return str(err.value)


def test_missing_csv_column_names_file_column_and_the_columns_there(tmp_path: Path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("prompt,output\n1,2\n")
    message = _error(_empirical(path, "tokens"))
    assert str(path) in message and "'tokens'" in message
    assert "'prompt'" in message and "'output'" in message


def test_missing_json_key_names_file_and_key() -> None:
    message = _error(_empirical(ALPACA_JSON, "L_t9.9"))
    assert str(ALPACA_JSON) in message and "L_t9.9" in message and "'L_t0.0'" in message


def test_non_numeric_value_names_file_column_and_line(tmp_path: Path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("tokens\n5\nmany\n7\n")
    message = _error(_empirical(path, "tokens"))
    assert str(path) in message and "tokens" in message
    assert "line 3" in message and "'many'" in message


def test_empty_cell_and_non_numeric_json_value(tmp_path: Path) -> None:
    csv_path = tmp_path / "gaps.csv"
    csv_path.write_text("tokens,other\n5,1\n,2\n")
    assert "line 3" in _error(_empirical(csv_path, "tokens"))
    json_path = tmp_path / "lengths.json"
    json_path.write_text('[{"n": 3}, {"n": "x"}]')
    message = _error(_empirical(json_path, "n"))
    assert str(json_path) in message and "record 1" in message


@pytest.mark.parametrize("bad", ["0", "-4", "2.5"])
def test_lengths_must_be_whole_and_positive(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(f"arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,7,{bad}\n")
    config = WorkloadConfig.model_validate(
        {
            "num_requests": 2,
            "arrival": {"kind": "trace", "path": path},
            "lengths_from_trace": {"path": path},
        }
    )
    message = _error(config)
    assert str(path) in message and "num_decode_tokens" in message and "line 3" in message


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    assert "file not found" in _error(_empirical(tmp_path / "nope.csv", "x"))
    odd = tmp_path / "lengths.txt"
    odd.write_text("x\n1\n")
    assert ".csv or .json" in _error(_empirical(odd, "x"))
