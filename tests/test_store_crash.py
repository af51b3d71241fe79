"""A run appears whole or not at all: SIGKILL mid-write, and exceptions mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures_records import make_meta, synthetic_records

from workbench.errors import WorkbenchError
from workbench.records import EmissionSpans, RunRecords
from workbench.store import ResultsStore

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
# 300k requests, 600k steps, 600k spans: the big write takes a few hundred milliseconds.
BIG = (300_000, 600_000, 600_000)
SMALL = (50, 100, 100)

CHILD = textwrap.dedent(
    f"""
    import sys
    from fixtures_records import make_meta, synthetic_records
    from workbench.store import ResultsStore

    big = synthetic_records(*{BIG}, seed=1)
    with ResultsStore.open(sys.argv[1]) as store:
        store.write_run(make_meta("child-small"), synthetic_records(*{SMALL}, seed=2))
        print("WRITING", flush=True)  # the big run's transaction starts now
        store.write_run(make_meta("big"), big)
        print("COMMITTED", flush=True)
    print("CLOSED", flush=True)
    """
)


def _counts(store: ResultsStore, run_id: str) -> tuple[int, ...]:
    con = store.connection
    runs = con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][0]
    rows = [
        con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run_id]).fetchall()[0][0]
        for t in ("requests", "steps", "emissions")
    ]
    return (runs, *rows)


def _kill_child(db: Path, marker: str, delay_s: float) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == marker:
            break
    time.sleep(delay_s)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)


@pytest.mark.slow
def test_sigkill_mid_write_leaves_whole_run_or_nothing(tmp_path: Path) -> None:
    before = synthetic_records(*SMALL, seed=3)
    outcomes = []
    # Kills inside the transaction, then right after COMMIT (during the closing checkpoint).
    cases = [("WRITING", d) for d in (0.0, 0.03, 0.1, 0.25)] + [
        ("COMMITTED", 0.0),
        ("COMMITTED", 0.05),
    ]
    for i, (marker, delay_s) in enumerate(cases):
        db = tmp_path / f"crash{i}.duckdb"
        with ResultsStore.open(db) as store:
            store.write_run(make_meta("before"), before)
        _kill_child(db, marker, delay_s)
        with ResultsStore.open(db) as store:  # reopens: WAL replayed, not corrupt
            assert _counts(store, "before") == (1, *SMALL)
            assert _counts(store, "child-small") == (1, *SMALL)  # committed before the kill
            big = _counts(store, "big")
            assert big in ((0, 0, 0, 0), (1, *BIG)), (marker, delay_s, big)
            outcomes.append(big[0])
            if big[0]:
                assert store.load_records("big").requests.request_id[-1] == BIG[0] - 1
    # At least one kill inside the transaction (the first, unless this process stalled for
    # the write's few hundred ms between reading the marker and sending the signal).
    assert 0 in outcomes[:4], "no kill landed mid-transaction"
    assert outcomes[-1] == 1, "a committed run must survive the kill"


def _broken_emissions(records: RunRecords) -> RunRecords:
    spans = records.emissions
    broken = EmissionSpans(
        spans.request_id, spans.replica, spans.first_step, spans.last_step[:-1],  # short column
        spans.tokens_per_step,
    )  # fmt: skip
    return RunRecords(records.requests, records.steps, broken, records.info)


def test_exception_mid_write_leaves_no_partial_run() -> None:
    records = synthetic_records(*SMALL)
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("kept"), records)
        # requests and steps are inserted before the emissions fail to convert
        with pytest.raises(WorkbenchError, match="nothing was written"):
            store.write_run(make_meta("broken"), _broken_emissions(records))
        assert _counts(store, "broken") == (0, 0, 0, 0)
        assert _counts(store, "kept") == (1, *SMALL)
        store.write_run(make_meta("after"), records)  # the connection is still usable
        assert _counts(store, "after") == (1, *SMALL)


def test_bad_column_type_leaves_no_partial_run() -> None:
    records = synthetic_records(*SMALL)
    spans = records.emissions
    spans.tokens_per_step = np.array(["x"] * len(spans.tokens_per_step), dtype=object)
    with ResultsStore.open(":memory:") as store:
        with pytest.raises(WorkbenchError, match="nothing was written"):
            store.write_run(make_meta("bad"), records)
        assert _counts(store, "bad") == (0, 0, 0, 0)


def test_duplicate_run_id_is_refused_and_leaves_the_first() -> None:
    records = synthetic_records(*SMALL)
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("same"), records)
        with pytest.raises(WorkbenchError, match="already"):
            store.write_run(make_meta("same"), records)
        assert _counts(store, "same") == (1, *SMALL)
