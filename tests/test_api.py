"""`import workbench as wb`: scenarios in, polars DataFrames out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from fixtures_records import make_meta, synthetic_records
from legacy_databases import CONFIG, schema_3_database

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.store import ResultsStore

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SMALL = {"workload.num_requests": 120}


def test_import_is_light() -> None:
    code = (
        "import sys, workbench, workbench.cli; "
        "heavy = [m for m in ('polars', 'simulator', 'torch', 'matplotlib') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert wb.run.__module__ == "workbench.api"  # loaded on first use


def test_run_then_read_everything_back(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    run = wb.run(wb.load_scenario(QUICKSTART, SMALL), db=db, label="first")
    assert len(run.run_id) == 12 and run.summary["completed"] == 120 and not run.saturated
    results = wb.open(db)
    summary = results.summary()
    assert summary.height == 1 and summary["label"][0] == "first"
    for key, value in run.summary.items():
        assert summary[key][0] == value, key
    requests = results.requests(run=run.run_id[:5])
    assert requests.height == 120
    assert {"ttft_s", "tpot_s", "e2e_s", "category"} <= set(requests.columns)
    assert requests["ttft_s"].median() * 1000 == pytest.approx(run.summary["median_ttft_ms"])
    steps, spans = run.steps(), run.emissions()
    assert (
        steps["emitted_tokens"].sum()
        == spans.select(
            ((pl.col("last_step") - pl.col("first_step") + 1) * pl.col("tokens_per_step")).sum()
        ).item()
    )
    assert results.runs()["gpu"].to_list() == ["h100-sxm"]
    pandas = pytest.importorskip("pandas")
    assert isinstance(summary.to_pandas(), pandas.DataFrame)


def test_overrides_as_python_values_or_cli_strings() -> None:
    as_values = wb.load_scenario(QUICKSTART, {"workload.arrival.rate_per_s": 9, "seed": 3})
    as_strings = wb.load_scenario(QUICKSTART, ["workload.arrival.rate_per_s=9", "seed=3"])
    assert as_values.config_hash() == as_strings.config_hash()
    assert as_values.workload.arrival.rate_per_s == 9


def test_a_sweep_returns_its_runs_and_resumes() -> None:
    grid = {"sweep": {"grid": {"workload.arrival.rate_per_s": [2, 4]}}}
    scenario = wb.load_scenario(QUICKSTART, SMALL | grid)
    with pytest.raises(WorkbenchError, match=r"wb\.run_sweep"):
        wb.run(scenario, db=wb.open(":memory:"))
    results = wb.open(":memory:")
    sweep = wb.run_sweep(scenario, db=results)
    frame = sweep.summary()
    assert frame["workload.arrival.rate_per_s"].to_list() == [2, 4]
    assert frame["rate_per_s"].to_list() == [2.0, 4.0]
    again = wb.run_sweep(scenario, db=results)
    assert [run.skipped for run in again] == [True, True]
    assert [run.run_id for run in again] == [run.run_id for run in sweep]
    assert results.summary(run=list(reversed(sweep.runs)))["rate_per_s"].to_list() == [4.0, 2.0]


def test_other_percentiles_and_sql() -> None:
    results = wb.open(":memory:")
    run = wb.run(wb.load_scenario(QUICKSTART, SMALL), db=results, percentiles=(50, 95))
    assert "p95_ttft_ms" in run.summary and "p99_ttft_ms" not in run.summary
    frame = results.summary(percentiles=(95,))
    assert frame["p95_ttft_ms"][0] == pytest.approx(run.summary["p95_ttft_ms"])
    assert frame.schema["p95_ttft_ms"] == pl.Float64 and frame.schema["saturated"] == pl.Boolean
    rows = results.sql("SELECT count(*) AS n FROM requests WHERE run_id = ?", [run.run_id])
    assert rows["n"][0] == 120


def test_an_older_database_reads_with_the_same_columns(tmp_path: Path) -> None:
    path = tmp_path / "v3.duckdb"
    schema_3_database(path, synthetic_records(100, 200, 200, seed=1))
    old = wb.open(path).summary()  # read-only: computed from the records
    new_db = tmp_path / "new.duckdb"
    wb.run(wb.load_scenario(QUICKSTART, SMALL), db=new_db)
    new = wb.open(new_db).summary()
    assert set(old.columns) <= set(new.columns)
    assert old["gpu"][0] == CONFIG["hardware"]["gpu"] and old["tensor_parallel"][0] == 4


def test_bad_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkbenchError, match="no such results database"):
        wb.open(tmp_path / "missing.duckdb")
    with pytest.raises(WorkbenchError, match="backend"):
        wb.run(wb.load_scenario(QUICKSTART, SMALL), backend="gpu", db=wb.open(":memory:"))
    with pytest.raises(WorkbenchError, match="no run with id or prefix"):
        wb.open(":memory:").requests(run="nope")


@pytest.mark.parametrize(
    ("call", "error", "expected"),
    [
        (lambda r: r.summary(run=1.5), TypeError, "run: expected a run id or prefix"),
        (lambda r: r.summary(run=["x", None]), TypeError, "run: expected"),
        (lambda r: r.summary(run=True), TypeError, "run: expected"),
        (lambda r: r.summary(percentiles=("50",)), TypeError, "percentiles: expected numbers"),
        (lambda r: r.summary(percentiles=50), TypeError, "percentiles: expected numbers"),
        (lambda r: r.summary(percentiles=(101,)), ValueError, "expected numbers from 0 to 100"),
        (lambda r: r.summary(percentiles=(-1,)), ValueError, "expected numbers from 0 to 100"),
        (lambda r: r.sql("SELEC 1"), WorkbenchError, "SQL: Parser Error"),
        (lambda r: r.sql(None), TypeError, "query: expected SQL text"),
    ],
)
def test_wrong_arguments_name_themselves(call, error: type, expected: str) -> None:
    with wb.open(":memory:") as results, pytest.raises(error, match=expected) as caught:
        call(results)
    assert "\n" not in str(caught.value)


def test_arrays_and_series_are_taken_as_lists(tmp_path: Path) -> None:
    """What a notebook holds: percentiles as a NumPy array, run ids as a polars column."""
    import numpy as np

    db = tmp_path / "a.duckdb"
    with ResultsStore.open(db) as store:
        store.write_run(make_meta("abc123"), synthetic_records(50, 100, 100, seed=2))
    results = wb.open(db)
    ids = results.runs()["run_id"]  # a polars Series
    summary = results.summary(run=ids, percentiles=np.array([90, 99.5]))
    assert "p99.5_ttft_ms" in summary.columns and summary["run_id"].to_list() == ["abc123"]
    assert results.requests(run=("abc",)).height == 50
    least_most = results.summary(run="abc", percentiles=(0, 100))  # the least and the most
    assert least_most["p0_ttft_ms"][0] <= least_most["p100_ttft_ms"][0]


def test_wrong_scenario_and_database_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a database named "None" used to appear
    with pytest.raises(TypeError, match="overrides: expected a mapping"):
        wb.load_scenario(QUICKSTART, "seed=3")  # one string, not a list of them
    with pytest.raises(TypeError, match="path: expected"):
        wb.load_scenario(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="db: expected a database path"):
        wb.run(wb.load_scenario(QUICKSTART, SMALL), db=None)  # type: ignore[arg-type]
    assert not (tmp_path / "None").exists()
    results = wb.open(":memory:")
    results.close()
    with pytest.raises(WorkbenchError, match="were closed"):
        results.runs()


def test_a_run_refused_leaves_no_new_database(tmp_path: Path) -> None:
    db = tmp_path / "new.duckdb"
    bad = wb.load_scenario(QUICKSTART, {**SMALL, "scheduler.kv_cache.num_blocks": 2})
    with pytest.raises(WorkbenchError, match="KV blocks"):
        wb.run(bad, db=db)
    assert not db.exists()


def test_a_digits_only_run_id_is_taken_as_an_int(tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    with ResultsStore.open(db) as store:  # an id of an older run, drawn before ids began
        store.write_run(make_meta("190660135082"), synthetic_records(50, 100, 100, seed=2))
    results = wb.open(db)
    assert results.requests(run=190660135082).height == 50  # as a notebook might pass it
    assert results.steps(run=[190660135082])["run_id"].unique().to_list() == ["190660135082"]
