"""The DuckDB results store: round trip, lookup, export, errors, and the SQL views."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest
from fixtures_records import make_meta, synthetic_records

from workbench import metrics
from workbench.errors import WorkbenchError
from workbench.records import EmissionSpans, RequestRecords, RunRecords, StepRecords
from workbench.store import ResultsStore
from workbench.store.db import run_meta_from_row
from workbench.store.schema import RECORD_TABLES

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def records() -> RunRecords:
    return synthetic_records(400, 800, 800, seed=5)


def _assert_records_equal(a: RunRecords, b: RunRecords) -> None:
    for part in ("requests", "steps", "emissions"):
        for f in dataclasses.fields(getattr(a, part)):
            x, y = getattr(getattr(a, part), f.name), getattr(getattr(b, part), f.name)
            assert x.dtype == y.dtype, (part, f.name)
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), (part, f.name)
    assert a.info == b.info


def test_record_tables_match_the_dataclasses() -> None:
    classes = {"requests": RequestRecords, "steps": StepRecords, "emissions": EmissionSpans}
    for table, cls in classes.items():
        assert list(RECORD_TABLES[table]) == [f.name for f in dataclasses.fields(cls)]


def test_round_trip(tmp_path: Path, records: RunRecords) -> None:
    meta = make_meta("run-a", sweep_point='{"workload.arrival.rate_per_s": 2.0}')
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        assert store.write_run(meta, records) == "run-a"
    with ResultsStore.open(tmp_path / "r.duckdb") as store:  # from disk, a fresh process view
        _assert_records_equal(records, store.load_records("run-a"))
        back = run_meta_from_row(store.get_run("run-a"))
    assert back.started_at == pytest.approx(meta.started_at, abs=1e-6)
    assert dataclasses.replace(back, started_at=0, finished_at=0) == dataclasses.replace(
        meta, started_at=0, finished_at=0
    )


def test_nan_is_stored_as_null(records: RunRecords) -> None:
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("a"), records)
        nulls = store.connection.execute(
            "SELECT count(*) FROM requests WHERE finish_s IS NULL"
        ).fetchall()[0][0]
    assert nulls == int(np.isnan(records.requests.finish_s).sum()) > 0


def test_list_runs_prefix_lookup_and_hashes(records: RunRecords) -> None:
    with ResultsStore.open(":memory:") as store:
        for run_id in ("abc123", "abd456", "xyz789"):
            store.write_run(make_meta(run_id, scenario_hash=f"h-{run_id}"), records)
        assert [r["run_id"] for r in store.list_runs()] == ["abc123", "abd456", "xyz789"]
        assert all(r["status"] == "complete" for r in store.list_runs())
        assert store.get_run("abc")["run_id"] == "abc123"
        assert store.get_run("x")["info"] == {"device": "synthetic"}
        with pytest.raises(WorkbenchError, match="ambiguous"):
            store.get_run("ab")
        with pytest.raises(WorkbenchError, match="no run"):
            store.get_run("nope")
        with pytest.raises(WorkbenchError, match="expected a run id or a prefix of one"):
            store.get_run("")  # a prefix of every run: not taken for the only one
        assert store.completed_hashes() == {"h-abc123", "h-abd456", "h-xyz789"}


def test_parquet_export(tmp_path: Path, records: RunRecords) -> None:
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("one"), records)
        store.write_run(make_meta("two"), records)
        out = store.export_parquet("requests", tmp_path / "req.parquet", run_id="tw")
        everything = store.export_parquet("run_summary", tmp_path / "summary.parquet")
        with pytest.raises(WorkbenchError, match="unknown table"):
            store.export_parquet("requests; DROP TABLE runs", tmp_path / "x.parquet")
    con = duckdb.connect()
    rows = con.execute(f"SELECT run_id, count(*) FROM '{out}' GROUP BY run_id").fetchall()
    assert rows == [("two", len(records.requests.request_id))]
    assert con.execute(f"SELECT count(*) FROM '{everything}'").fetchall()[0][0] == 2


def test_parquet_export_to_a_folder_or_nowhere(tmp_path: Path, records: RunRecords) -> None:
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("one"), records)
        with pytest.raises(WorkbenchError, match="a folder, not a file") as caught:
            store.export_parquet("requests", tmp_path)
        assert caught.value.one_line().startswith(str(tmp_path))
        with pytest.raises(WorkbenchError, match="folder does not exist"):
            store.export_parquet("requests", tmp_path / "no" / "x.parquet")


def test_ctrl_c_during_the_write_comes_after_it(
    tmp_path: Path, records: RunRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C while a run is written is raised once the run is stored whole."""
    insert = ResultsStore._insert_records

    def interrupted(self: ResultsStore, table: str, columns: object, run_id: str) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at once, inside the write
        insert(self, table, columns, run_id)

    monkeypatch.setattr(ResultsStore, "_insert_records", interrupted)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with ResultsStore.open(tmp_path / "r.duckdb") as store:
            with pytest.raises(KeyboardInterrupt):
                store.write_run(make_meta("run-a"), records)
            _assert_records_equal(records, store.load_records("run-a"))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, handler)


def test_an_ignored_ctrl_c_stays_ignored_during_the_write(
    tmp_path: Path, records: RunRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert = ResultsStore._insert_records

    def interrupted(self: ResultsStore, table: str, columns: object, run_id: str) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        insert(self, table, columns, run_id)

    monkeypatch.setattr(ResultsStore, "_insert_records", interrupted)
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's
    try:
        with ResultsStore.open(tmp_path / "r.duckdb") as store:
            store.write_run(make_meta("run-a"), records)  # no KeyboardInterrupt
            _assert_records_equal(records, store.load_records("run-a"))
    finally:
        signal.signal(signal.SIGINT, handler)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_database_that_cannot_be_made_says_so() -> None:
    with pytest.raises(WorkbenchError, match="cannot open the database for writing") as caught:
        ResultsStore.open("/proc/results.duckdb")  # /proc exists, no file can be made in it
    assert "not a DuckDB file" not in str(caught.value)


@pytest.mark.parametrize("dropped", ["VIEW run_summary", "TABLE requests"])
def test_a_database_missing_a_part_is_refused_whole(tmp_path: Path, dropped: str) -> None:
    path = tmp_path / "damaged.duckdb"
    with ResultsStore.open(path):
        pass
    con = duckdb.connect(str(path))
    if dropped == "TABLE requests":
        con.execute("DROP VIEW run_summary")  # the views read the table: they go first
        con.execute("DROP VIEW request_metrics")
    con.execute(f"DROP {dropped}")
    con.close()
    with pytest.raises(WorkbenchError, match="a damaged results database: it lacks") as caught:
        ResultsStore.open(path, read_only=True)
    assert dropped.split()[1] in str(caught.value)


def test_read_only_store_reads_and_refuses_writes(tmp_path: Path, records: RunRecords) -> None:
    path = tmp_path / "ro.duckdb"
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("a"), records)
    with ResultsStore.open(path, read_only=True) as store:
        assert [r["run_id"] for r in store.list_runs()] == ["a"]
        with pytest.raises(WorkbenchError, match="nothing was written"):
            store.write_run(make_meta("b"), records)


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(WorkbenchError, match="not a workbench results database") as info:
        ResultsStore.open(path)
    assert str(path) in str(info.value)


def test_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE something (x INTEGER)")
    con.close()
    with pytest.raises(WorkbenchError, match="no schema_version"):
        ResultsStore.open(path)


def test_missing_folder_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "r.duckdb"
    with pytest.raises(WorkbenchError, match="does not exist"):
        ResultsStore.open(path)
    assert not path.parent.exists()
    with pytest.raises(WorkbenchError, match="no such"):
        ResultsStore.open(tmp_path / "absent.duckdb", read_only=True)
    assert not (tmp_path / "absent.duckdb").exists()


def test_locked_file_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.duckdb"
    ResultsStore.open(path).close()
    holder = textwrap.dedent(
        """
        import sys
        from workbench.store import ResultsStore
        store = ResultsStore.open(sys.argv[1])
        print("OPEN", flush=True)
        sys.stdin.read()  # hold the lock until the parent closes our stdin
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", holder, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "OPEN"
        with pytest.raises(WorkbenchError, match="another process"):
            ResultsStore.open(path)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    ResultsStore.open(path).close()  # free again


def test_views_agree_with_the_metrics_module(records: RunRecords) -> None:
    expected = metrics.summarize(records)
    per_request = metrics.request_metrics(records)
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("v"), records)
        con = store.connection
        cursor = con.execute("SELECT * FROM run_summary WHERE run_id = 'v'")
        names = [d[0] for d in cursor.description]
        row = dict(zip(names, cursor.fetchall()[0], strict=True))
        sql_rows = con.execute(
            "SELECT ttft_s, tpot_s, e2e_s FROM request_metrics WHERE run_id = 'v'"
        ).fetchall()
    sql_columns = np.array(sql_rows, dtype=float).T  # (3, n): None (NULL) → NaN
    for column, sql in zip(("ttft_s", "tpot_s", "e2e_s"), sql_columns, strict=True):
        np.testing.assert_allclose(sql, per_request[column], rtol=1e-12, equal_nan=True)
    for key in ("completed", "num_requests", "n_ttft", "n_tpot", "n_e2el"):
        assert row[key] == expected[key], key
    for key in ("duration", "request_throughput"):
        assert row[key] == pytest.approx(expected[key], rel=1e-12), key
    for metric in ("ttft", "tpot", "e2el"):
        for stat in ("mean", "median", "p90", "p99"):
            key = f"{stat}_{metric}_ms"
            assert row[key] == pytest.approx(expected[key], rel=1e-9), key
