"""The results database schema: tables, views and the schema version.

Record tables hold exactly the columns of the `workbench.records` dataclasses, with
`run_id` first. The column maps below are the single source of truth for both the DDL and
the numpy dtypes `load_records` gives back (a test checks they match the dataclasses).
Views recompute the per-request metrics in SQL the same way as `workbench.metrics`, which
stays the reference (ITL needs the span arithmetic and lives in Python only).
"""

from __future__ import annotations

import numpy as np

SCHEMA_VERSION = 3
# The oldest schema a read-only store reads as it is: since then only columns were added,
# which `load_records` fills for old databases (NULL, or LEGACY_COLUMNS' derivation). A
# writable open migrates.
OLDEST_READABLE_VERSION = 1

REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "BIGINT",
    "replica": "INTEGER",
    "arrival_s": "DOUBLE",
    "first_token_s": "DOUBLE",  # NULL when no token was emitted (NaN in numpy)
    "finish_s": "DOUBLE",  # NULL when unfinished (NaN in numpy)
    "prompt_tokens": "BIGINT",
    "output_tokens": "BIGINT",
    "preemptions": "INTEGER",
    "status": "VARCHAR",
    "category": "VARCHAR",  # the prompt's category (workload.prompts); NULL: synthetic (v2)
}
STEP_COLUMNS: dict[str, str] = {
    "replica": "INTEGER",
    "step": "BIGINT",
    "start_s": "DOUBLE",
    "duration_s": "DOUBLE",
    "batch_size": "INTEGER",
    "prefill_tokens": "BIGINT",
    "decode_tokens": "BIGINT",
    "kv_blocks_used": "BIGINT",
    "emitted_tokens": "BIGINT",
    "drafted_tokens": "BIGINT",
    "accepted_tokens": "BIGINT",
    "verified_tokens": "BIGINT",  # (v3)
}
EMISSION_COLUMNS: dict[str, str] = {
    "request_id": "BIGINT",
    "replica": "INTEGER",
    "first_step": "BIGINT",
    "last_step": "BIGINT",
    "tokens_per_step": "INTEGER",
}
# Table name → columns, in the order write_run inserts them.
RECORD_TABLES: dict[str, dict[str, str]] = {
    "requests": REQUEST_COLUMNS,
    "steps": STEP_COLUMNS,
    "emissions": EMISSION_COLUMNS,
}
NUMPY_DTYPES: dict[str, np.dtype] = {
    "BIGINT": np.dtype(np.int64),
    "INTEGER": np.dtype(np.int32),
    "DOUBLE": np.dtype(np.float64),
    "VARCHAR": np.dtype(object),
}

RUNS_DDL = """
CREATE TABLE runs (
    run_id VARCHAR PRIMARY KEY,
    scenario_name VARCHAR NOT NULL,
    scenario_hash VARCHAR NOT NULL,
    config_json JSON NOT NULL,
    backend VARCHAR NOT NULL,
    decoder VARCHAR NOT NULL,
    scheduler VARCHAR NOT NULL,
    seed BIGINT NOT NULL,
    versions JSON,
    git_sha VARCHAR,
    started_at TIMESTAMP,  -- UTC
    finished_at TIMESTAMP,  -- UTC
    status VARCHAR NOT NULL,  -- 'complete': a run is written whole or not at all
    sweep_point JSON,
    info JSON  -- RunRecords.info: backend facts (device, versions...)
)
"""

SCHEMA_VERSION_DDL = """
CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)
"""

REQUEST_METRICS_VIEW = """
CREATE VIEW request_metrics AS
SELECT
    run_id, request_id, replica, status, category, arrival_s, first_token_s, finish_s,
    prompt_tokens, output_tokens, preemptions,
    CASE WHEN status = 'finished' THEN first_token_s - arrival_s END AS ttft_s,
    CASE WHEN status = 'finished' THEN finish_s - arrival_s END AS e2e_s,
    CASE WHEN status = 'finished' AND output_tokens > 1
        THEN ((finish_s - arrival_s) - (first_token_s - arrival_s)) / (output_tokens - 1)
    END AS tpot_s
FROM requests
"""


def _latency_columns(metric: str, column: str) -> str:
    ms = f"{column} * 1000.0"
    return f"""avg({ms}) AS mean_{metric}_ms,
    quantile_cont({ms}, 0.5) AS median_{metric}_ms,
    quantile_cont({ms}, 0.9) AS p90_{metric}_ms,
    quantile_cont({ms}, 0.99) AS p99_{metric}_ms,
    count({column}) AS n_{metric}"""


# Completed requests only, like workbench.metrics.summarize.
RUN_SUMMARY_VIEW = f"""
CREATE VIEW run_summary AS
WITH per_run AS (
    SELECT
        run_id,
        count(*) AS num_requests,
        count(*) FILTER (WHERE status = 'finished') AS completed,
        max(finish_s) FILTER (WHERE status = 'finished') - min(arrival_s) AS duration,
        {_latency_columns("ttft", "ttft_s")},
        {_latency_columns("tpot", "tpot_s")},
        {_latency_columns("e2el", "e2e_s")}
    FROM request_metrics
    GROUP BY run_id
)
SELECT
    runs.run_id, runs.scenario_name, runs.backend, runs.decoder, runs.scheduler,
    per_run.* EXCLUDE (run_id),
    CASE WHEN per_run.duration > 0 THEN per_run.completed / per_run.duration END
        AS request_throughput
FROM runs LEFT JOIN per_run USING (run_id)
"""


def record_table_ddl(table: str) -> str:
    columns = ",\n    ".join(f"{name} {sql}" for name, sql in RECORD_TABLES[table].items())
    return f"CREATE TABLE {table} (\n    run_id VARCHAR NOT NULL,\n    {columns}\n)"


def create_statements() -> list[str]:
    """Everything a new database needs, in order (run inside one transaction)."""
    return [
        SCHEMA_VERSION_DDL,
        RUNS_DDL,
        *(record_table_ddl(table) for table in RECORD_TABLES),
        REQUEST_METRICS_VIEW,
        RUN_SUMMARY_VIEW,
    ]


# Columns added since schema 1 that old databases derive from what they have: before v3,
# decoders verified 1 + drafted tokens per sequence (lookahead's window went unrecorded).
LEGACY_COLUMNS: dict[str, dict[str, str]] = {
    "steps": {"verified_tokens": "decode_tokens + drafted_tokens"},
}

# version → statements upgrading a database from `version` to `version + 1`.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        "ALTER TABLE requests ADD COLUMN category VARCHAR",
        "DROP VIEW run_summary",  # it reads request_metrics, which gains the column
        "DROP VIEW request_metrics",
        REQUEST_METRICS_VIEW,
        RUN_SUMMARY_VIEW,
    ],
    2: [
        "ALTER TABLE steps ADD COLUMN verified_tokens BIGINT",
        f"UPDATE steps SET verified_tokens = {LEGACY_COLUMNS['steps']['verified_tokens']}",
    ],
}
