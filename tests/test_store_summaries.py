"""What the CLI prints and what SQL sees agree: every summary key is stored per run (schema
4), the main configuration values are plain columns, and older databases still read and
migrate with the same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
from fixtures_records import make_meta, synthetic_records
from legacy_databases import CONFIG, schema_3_database

from workbench import metrics
from workbench.errors import WorkbenchError
from workbench.records import RunRecords
from workbench.scenario.system import SLOConfig
from workbench.store import ResultsStore
from workbench.store.schema import SCHEMA_VERSION, SUMMARY_COLUMNS
from workbench.store.summaries import summary_row

SLO = SLOConfig(ttft_ms=500.0, tpot_ms=40.0)


def _drafting(records: RunRecords) -> RunRecords:
    steps = records.steps
    steps.drafted_tokens = 3 * steps.decode_tokens
    steps.accepted_tokens = steps.decode_tokens.copy()
    steps.verified_tokens = 4 * steps.decode_tokens
    return records


@pytest.fixture
def records() -> RunRecords:
    return _drafting(synthetic_records(200, 400, 400, seed=5))


def _view_row(store: ResultsStore, run_id: str) -> dict:
    cursor = store.connection.execute("SELECT * FROM run_summary WHERE run_id = ?", [run_id])
    names = [d[0] for d in cursor.description]
    return dict(zip(names, cursor.fetchall()[0], strict=True))


def test_every_summary_key_is_a_column_of_the_view(records: RunRecords) -> None:
    expected = metrics.summarize(records, SLO)
    assert "acceptance_rate" in expected and "slo_tpot_attainment" in expected
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("r", config=CONFIG), records, label="first try")
        row = _view_row(store, "r")
        assert store.run_summary("r") == expected  # what `workbench summary --json` prints
    for key, value in expected.items():
        assert row[key] == value, key
    assert row["label"] == "first try"
    assert (row["gpu"], row["tensor_parallel"], row["replicas"]) == ("h100-sxm", 4, 2)
    assert (row["rate_per_s"], row["model"], row["cost_model"]) == (3.5, "llama-3-8b", "roofline")
    assert (row["num_speculative_tokens"], row["max_batch_size"]) == (4, 64)
    assert (row["slo_ttft_ms"], row["slo_e2e_ms"]) == (500.0, None)
    assert row["wall_s"] == pytest.approx(1.0, abs=1e-3)  # make_meta: finished 1 s after start


def test_static_batch_and_vanilla_keys_fit_the_columns() -> None:
    plain = synthetic_records(50, 100, 100, seed=1)
    plain.info["scheduler"] = "sequence_scheduling"
    summary = metrics.summarize(plain, SLOConfig(ttft_ms=1.0, e2e_ms=2.0))
    assert "effective_token_ratio" in summary
    assert set(summary) <= set(SUMMARY_COLUMNS)
    row = summary_row(summary)
    assert len(row) == len(SUMMARY_COLUMNS)


def test_a_summary_key_without_a_column_is_refused() -> None:
    summary = metrics.summarize(synthetic_records(50, 100, 100))
    with pytest.raises(WorkbenchError, match="new_metric"):
        summary_row({**summary, "new_metric": 1.0})
    summary_row({**summary, "p95_ttft_ms": 1.0})  # other percentiles: recomputed on demand


def test_other_percentiles_are_recomputed_from_the_records(records: RunRecords) -> None:
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("r", config=CONFIG), records)
        summary = store.run_summary("r", percentiles=(50.0, 95.0, 99.9))
    expected = metrics.summarize(records, SLO, percentiles=(50.0, 95.0, 99.9))
    assert summary == expected
    assert "p95_ttft_ms" in summary and "p90_ttft_ms" not in summary
    assert summary["p50_ttft_ms"] == summary["median_ttft_ms"]


# ---------------------------------------------------------------------- schema 3 → 4


def _version(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0]
    finally:
        con.close()


def test_schema_3_reads_as_it_is_and_migrates_with_the_same_summary(
    tmp_path: Path, records: RunRecords
) -> None:
    path = tmp_path / "v3.duckdb"
    schema_3_database(path, records)
    expected = metrics.summarize(records, SLO)
    with ResultsStore.open(path, read_only=True) as store:
        run = store.get_run("old")
        assert (run["gpu"], run["tensor_parallel"], run["label"]) == ("h100-sxm", 4, None)
        assert store.run_summary("old") == expected  # computed: no table to read it from
    assert _version(path) == 3  # reading changed nothing

    with ResultsStore.open(path) as store:  # a writable open migrates
        assert store.run_summary("old") == expected  # now read from run_summaries
        row = _view_row(store, "old")
        store.write_run(make_meta("new", config=CONFIG), records, label="after")
        new = _view_row(store, "new")
    assert _version(path) == SCHEMA_VERSION  # migrated all the way
    assert row["p99_itl_ms"] == expected["p99_itl_ms"] and row["rate_per_s"] == 3.5
    assert row["saturated"] == expected["saturated"]
    assert {k: new[k] for k in expected} == {k: row[k] for k in expected}
    assert new["label"] == "after"


def test_a_failed_migration_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    records = synthetic_records(50, 100, 100, seed=2)
    path = tmp_path / "v3.duckdb"
    schema_3_database(path, records)
    con = duckdb.connect(str(path))
    con.execute("DELETE FROM steps")  # the stored run's spans now point at missing steps
    con.close()
    with pytest.raises(WorkbenchError, match=r"cannot upgrade to schema 4 .* run 'old'"):
        ResultsStore.open(path)
    assert _version(path) == 3
    con = duckdb.connect(str(path), read_only=True)
    tables = {
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    con.close()
    assert "run_summaries" not in tables


def test_json_columns_reach_polars_as_text(records: RunRecords) -> None:
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("r", config=CONFIG), records)
        frame = store.connection.sql("SELECT config_json, rate_per_s FROM runs").pl()
    assert json.loads(frame["config_json"][0])["hardware"]["gpu"] == "h100-sxm"
    assert np.isclose(frame["rate_per_s"][0], 3.5)
