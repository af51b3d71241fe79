"""Databases written before `requests.category` (schema 1), `steps.verified_tokens`
(schema 2), APAR's `branches.steps` (schema 9) or `steps.draft_s` (schema 10) still read,
and upgrade on write."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
from fixtures_records import make_meta, synthetic_records

from workbench.records import RunRecords
from workbench.store import ResultsStore
from workbench.store.schema import (
    CONFIG_COLUMNS,
    REQUEST_METRICS_VIEW,
    RUN_SUMMARY_VIEW_V1,
    SCHEMA_VERSION,
)


def _schema_1_database(path: Path, records: RunRecords) -> None:
    """A database as schema 1 wrote it: one run, no category column."""
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("old"), records)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW run_summary")
    con.execute("DROP VIEW request_metrics")
    con.execute("DROP TABLE run_summaries")
    for column in ("label", *CONFIG_COLUMNS):
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    con.execute("ALTER TABLE requests DROP COLUMN category")
    con.execute("ALTER TABLE steps DROP COLUMN verified_tokens")
    con.execute("ALTER TABLE steps DROP COLUMN draft_s")
    con.execute(REQUEST_METRICS_VIEW.replace(" category,", ""))
    con.execute(RUN_SUMMARY_VIEW_V1)
    con.execute("DELETE FROM schema_version")
    con.execute("INSERT INTO schema_version VALUES (1, now()::TIMESTAMP)")
    con.close()


@pytest.fixture
def old_db(tmp_path: Path) -> tuple[Path, RunRecords]:
    records = synthetic_records(50, 100, 100, seed=3)
    path = tmp_path / "old.duckdb"
    _schema_1_database(path, records)
    return path, records


def _version(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0]
    finally:
        con.close()


def test_read_only_open_reads_old_runs_with_no_categories(old_db: tuple[Path, RunRecords]) -> None:
    path, records = old_db
    with ResultsStore.open(path, read_only=True) as store:
        back = store.load_records("old")
        assert [r["run_id"] for r in store.list_runs()] == ["old"]
    assert back.requests.category.tolist() == [None] * 50
    assert np.array_equal(back.requests.prompt_tokens, records.requests.prompt_tokens)
    assert _version(path) == 1  # reading changes nothing


def test_writable_open_migrates_and_keeps_old_rows(old_db: tuple[Path, RunRecords]) -> None:
    path, records = old_db
    records.requests.category = np.array(["qa", "rag"] * 25, dtype=object)
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("new"), records)
        old, new = store.load_records("old"), store.load_records("new")
        view = store.connection.sql(
            "SELECT run_id, count(category) FROM request_metrics GROUP BY ALL ORDER BY 1"
        ).fetchall()
    assert _version(path) == SCHEMA_VERSION
    assert old.requests.category.tolist() == [None] * 50
    assert new.requests.category.tolist() == ["qa", "rag"] * 25
    assert view == [("new", 50), ("old", 0)]


def _drafting(records: RunRecords) -> RunRecords:
    """The records of a decoder that drafted 3 tokens per decoding sequence, 1 accepted."""
    steps = records.steps
    steps.drafted_tokens = 3 * steps.decode_tokens
    steps.accepted_tokens = steps.decode_tokens.copy()
    steps.verified_tokens = 7 * steps.decode_tokens  # what v3 records, e.g. with a window
    return records


def test_verified_tokens_of_old_runs_are_one_plus_drafted(tmp_path: Path) -> None:
    """Before schema 3 a decoder verified 1 + drafted tokens per sequence: read-only opens
    derive that, a migration writes it; new runs keep what they recorded."""
    records = _drafting(synthetic_records(50, 100, 100, seed=4))
    path = tmp_path / "v1.duckdb"
    _schema_1_database(path, records)
    expected = 4 * records.steps.decode_tokens
    with ResultsStore.open(path, read_only=True) as store:
        assert np.array_equal(store.load_records("old").steps.verified_tokens, expected)
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("new"), records)
        old, new = store.load_records("old"), store.load_records("new")
    assert np.array_equal(old.steps.verified_tokens, expected)
    assert np.array_equal(new.steps.verified_tokens, 7 * records.steps.decode_tokens)


def test_apar_branches_before_schema_10_emitted_one_token_per_step(tmp_path: Path) -> None:
    """Before schema 10 a branch emitted one token per step (no speculation): read-only
    opens derive its steps from its tokens, a migration writes them."""
    from workbench.apar_records import BranchRecords

    records = synthetic_records(20, 100, 40, seed=5)
    n = len(records.requests.request_id)
    tokens = np.arange(3, 3 + n, dtype=np.int64)
    zeros = np.zeros(n, dtype=np.int64)
    records.branches = BranchRecords(
        request_id=np.arange(n, dtype=np.int64), branch=zeros.astype(np.int32),
        parent=np.full(n, -1, dtype=np.int32), fork_at=zeros, tokens=tokens,
        answer_tokens=tokens - 1, first_step=zeros, last_step=tokens - 1,
        replica=zeros.astype(np.int32), steps=tokens // 2,
    )  # fmt: skip
    path = tmp_path / "v9.duckdb"
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("old"), records)
    _downgrade(path, 9, "ALTER TABLE branches DROP COLUMN steps")
    with ResultsStore.open(path, read_only=True) as store:
        assert np.array_equal(store.load_records("old").branches.steps, tokens)
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("new"), records)
        old, new = store.load_records("old"), store.load_records("new")
    assert _version(path) == SCHEMA_VERSION
    assert np.array_equal(old.branches.steps, tokens)
    assert np.array_equal(new.branches.steps, tokens // 2)


def _downgrade(path: Path, version: int, *statements: str) -> None:
    """The database at `path` as schema `version` left it: `statements` undo what came since."""
    con = duckdb.connect(str(path))
    for statement in (*statements, "ALTER TABLE steps DROP COLUMN draft_s"):
        con.execute(statement)
    con.execute("DELETE FROM schema_version")
    con.execute(f"INSERT INTO schema_version VALUES ({version}, now()::TIMESTAMP)")
    con.close()


def test_draft_time_of_runs_before_schema_11_is_unknown(tmp_path: Path) -> None:
    """Before schema 11 no step recorded its draft time: old runs read NaN (unknown, not
    zero) read-only and after the migration; a new run keeps what it recorded."""
    records = _drafting(synthetic_records(20, 100, 40, seed=6))
    records.steps.draft_s = 0.25 * records.steps.duration_s
    path = tmp_path / "v10.duckdb"
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("old"), records)
    _downgrade(path, 10)
    with ResultsStore.open(path, read_only=True) as store:
        assert np.isnan(store.load_records("old").steps.draft_s).all()
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("new"), records)
        old, new = store.load_records("old"), store.load_records("new")
    assert _version(path) == SCHEMA_VERSION
    assert np.isnan(old.steps.draft_s).all()
    assert np.array_equal(new.steps.draft_s, records.steps.draft_s)
    assert np.array_equal(new.steps.verified_tokens, records.steps.verified_tokens)
