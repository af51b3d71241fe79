"""Results databases as older workbench versions wrote them, for migration tests."""

from __future__ import annotations

from pathlib import Path

import duckdb
from fixtures_records import make_meta

from workbench.records import RunRecords
from workbench.store import ResultsStore
from workbench.store.schema import CONFIG_COLUMNS, RUN_SUMMARY_VIEW_V1

# A run's configuration with every config column's field set.
CONFIG = {
    "name": "tiny",
    "model": {"name": "llama-3-8b", "dtype": "bf16"},
    "hardware": {"gpu": "h100-sxm", "replicas": 2, "tensor_parallel": 4},
    "cost_model": {"kind": "roofline"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 3.5}},
    "scheduler": {"kind": "continuous", "max_batch_size": 64},
    "decoder": {"kind": "speculative", "num_speculative_tokens": 4},
    "slo": {"ttft_ms": 500.0, "tpot_ms": 40.0, "e2e_ms": None},
}


def schema_3_database(path: Path, records: RunRecords) -> None:
    """A database as schema 3 wrote it: no run_summaries, no label or config columns."""
    with ResultsStore.open(path) as store:
        store.write_run(make_meta("old", config=CONFIG), records)
    con = duckdb.connect(str(path))
    con.execute("DROP VIEW run_summary")
    con.execute("DROP TABLE run_summaries")
    for column in ("label", *CONFIG_COLUMNS):
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    con.execute("ALTER TABLE steps DROP COLUMN draft_s")  # schema 11
    con.execute(RUN_SUMMARY_VIEW_V1)
    con.execute("DELETE FROM schema_version")
    con.execute("INSERT INTO schema_version VALUES (3, now()::TIMESTAMP)")
    con.close()
