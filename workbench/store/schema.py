"""The results database schema: tables, views and the schema version.

Record tables hold exactly the columns of the `workbench.records` dataclasses, with
`run_id` first. The column maps below are the single source of truth for both the DDL and
the numpy dtypes `load_records` gives back (a test checks they match the dataclasses).
Views recompute the per-request metrics in SQL the same way as `workbench.metrics`, which
stays the reference (ITL needs the span arithmetic and lives in Python only).

Since schema 4 a run's summary as `workbench.metrics.summarize` computes it (what the CLI
prints) is stored whole in `run_summaries`, one plain column per key, and the `runs` row
carries its main configuration values as plain columns (`CONFIG_COLUMNS`), so SQL and
DataFrames see what the CLI prints. `docs/results.md` documents every column (a test
compares it with this schema).

Since schema 5 calibration profiles (`workbench calibrate`) live in `profiles` (one row per
profile: model, device, dtype, threads, versions, date) and `profile_points` (one row per
measured engine step); `workbench.store.profiles` reads and writes them. Schema 6 adds
APAR's branch trees and summary columns, schema 7 the summary columns of pipeline-parallel
(PipeInfer) runs, schema 8 `outputs` (what a real run answered).

Migrations: `MIGRATIONS[v]` lists the steps from version v to v + 1, SQL statements or
`PythonStep`s (work SQL cannot do, run by `workbench.store.db` in the same transaction). A
new table (an `outputs` or `profiles` table, say) is one more entry and a version bump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from workbench.metrics import LATENCY_METRICS, STATISTICS
from workbench.metrics.apar import APAR_SUMMARY_COLUMNS
from workbench.metrics.batch import BATCH_METRICS
from workbench.metrics.decoder import MAX_POSITIONS
from workbench.metrics.pipeline import PIPELINE_SUMMARY_COLUMNS
from workbench.metrics.saturation import SATURATION_KEYS

SCHEMA_VERSION = 12
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
    "draft_s": "DOUBLE",  # (v11) NULL: not recorded
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

# Columns of `runs` added in schema 4, each read from the run's config_json (one definition
# for new runs, migrated ones and read-only opens of older databases): name → (SQL type,
# JSON path). NULL where the configuration has no such field (a closed-loop rate, say).
CONFIG_COLUMNS: dict[str, tuple[str, str]] = {
    "model": ("VARCHAR", "$.model.name"),
    "dtype": ("VARCHAR", "$.model.dtype"),
    "gpu": ("VARCHAR", "$.hardware.gpu"),
    "tensor_parallel": ("INTEGER", "$.hardware.tensor_parallel"),
    "replicas": ("INTEGER", "$.hardware.replicas"),
    "cost_model": ("VARCHAR", "$.cost_model.kind"),
    "arrival": ("VARCHAR", "$.workload.arrival.kind"),
    "rate_per_s": ("DOUBLE", "$.workload.arrival.rate_per_s"),
    "max_batch_size": ("INTEGER", "$.scheduler.max_batch_size"),
    "num_speculative_tokens": ("INTEGER", "$.decoder.num_speculative_tokens"),
    "slo_ttft_ms": ("DOUBLE", "$.slo.ttft_ms"),
    "slo_tpot_ms": ("DOUBLE", "$.slo.tpot_ms"),
    "slo_e2e_ms": ("DOUBLE", "$.slo.e2e_ms"),
}
# Calibration profiles (schema 5): a profile's conditions, and its measured steps.
PROFILE_COLUMNS: dict[str, str] = {
    "profile_id": "VARCHAR PRIMARY KEY",
    "name": "VARCHAR NOT NULL",  # what scenarios name it by (`cost_model.profile`)
    "model": "VARCHAR NOT NULL",  # the model as the user named it (zoo name or folder)
    "checkpoint": "VARCHAR NOT NULL",  # the checkpoint folder measured
    "model_shape": "JSON NOT NULL",  # layers, widths, heads, vocab: what the cost depends on
    "device": "VARCHAR NOT NULL",  # cpu | cuda
    "device_name": "VARCHAR NOT NULL",  # the CPU model or the CUDA device's name
    "dtype": "VARCHAR NOT NULL",
    "threads": "INTEGER NOT NULL",  # torch intra-op threads while measuring
    "grid": "VARCHAR NOT NULL",  # the designed grid's name
    "probes": "INTEGER NOT NULL",  # probes in the grid (complete when all are in)
    "versions": "JSON",
    "git_sha": "VARCHAR",
    "created_at": "TIMESTAMP NOT NULL",  # UTC
    "completed_at": "TIMESTAMP",  # UTC; NULL while probes are missing
    "info": "JSON",  # kernels, linear implementation, host load while measuring...
}
POINT_COLUMNS: dict[str, str] = {
    "profile_id": "VARCHAR NOT NULL",
    "probe": "VARCHAR NOT NULL",  # the grid probe (a short serving run) it came from
    "step": "BIGINT NOT NULL",  # the step's index in its probe
    "prefill_chunk_tokens": "VARCHAR NOT NULL",  # per prefilling sequence, space-separated
    "prefill_context_tokens": "VARCHAR NOT NULL",  # KV before each chunk, space-separated
    "decode_batch_size": "INTEGER NOT NULL",
    "decode_context_sum": "BIGINT NOT NULL",
    "decode_extra_tokens": "BIGINT NOT NULL",
    "decode_extra_context_sum": "BIGINT NOT NULL",
    "forward_s": "DOUBLE NOT NULL",  # the engine's recorded step duration (its forwards)
    "step_s": "DOUBLE NOT NULL",  # end of the previous step to end of this one
    "decode_context_max": "BIGINT DEFAULT 0",  # longest decode KV (v9; 0: unknown)
    "idle_before_s": "DOUBLE DEFAULT 0",  # the engine slept this long before the step (v9)
    "decode_forks": "BIGINT DEFAULT 0",  # APAR forks' chunks in the decode forward (v12)
}
# IF NOT EXISTS: tests fake older databases by stripping a new one, whose profile tables
# the migration then meets again; they hold nothing a migration would have to change.
PROFILE_TABLES_DDL = [
    f"CREATE TABLE IF NOT EXISTS {table} ("
    + ", ".join(f"{name} {sql}" for name, sql in columns.items())
    + ")"
    for table, columns in (("profiles", PROFILE_COLUMNS), ("profile_points", POINT_COLUMNS))
]


# APAR runs' branch trees (schema 6): one row per branch of every request
# (`workbench.apar_records.BranchRecords`).
BRANCH_COLUMNS: dict[str, str] = {
    "request_id": "BIGINT",
    "branch": "INTEGER",  # 0 is the root
    "parent": "INTEGER",  # the branch it forked from, -1 for the root
    "fork_at": "BIGINT",  # the parent's own tokens when it forked, its fork token included
    "tokens": "BIGINT",  # own tokens emitted (fork tokens and EOS included)
    "answer_tokens": "BIGINT",  # own tokens in the reassembled answer
    "first_step": "BIGINT",  # step of its first own emission
    "last_step": "BIGINT",  # and of its last
    "replica": "INTEGER",
    "steps": "BIGINT",  # steps it emitted in (schema 10; before, one token each: its tokens)
}
BRANCH_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS branches (run_id VARCHAR NOT NULL, "
    + ", ".join(f"{name} {sql}" for name, sql in BRANCH_COLUMNS.items())
    + ")"
)


# What a real run answered (schema 8): per request its emitted token ids and their text
# (`workbench.records.OutputRecords`). Simulated runs have none.
OUTPUTS_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS outputs (run_id VARCHAR NOT NULL, request_id BIGINT, "
    "token_ids BIGINT[], text VARCHAR)"
)


# The run's free-text label (`workbench run --label`), NULL without one (schema 4).
LABEL_COLUMN = ("label", "VARCHAR")


def config_column_sql(name: str) -> str:
    """The SQL expression of a config column, over `config_json`."""
    sql_type, path = CONFIG_COLUMNS[name]
    return f"TRY_CAST(json_extract_string(config_json, '{path}') AS {sql_type})"


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


_DECODER_KEYS = (
    "acceptance_rate",
    "mean_accepted_tokens",
    "mean_tokens_per_decode_step",
    "step_compression_ratio",
    "extra_flops_share",
)
_SLO_KEYS = tuple(f"slo_{name}_attainment" for name in ("ttft", "tpot", "e2e"))
_POSITION_KEYS = tuple(f"acceptance_at_position_{i}" for i in range(1, MAX_POSITIONS + 1))
# Keys only some runs have: one per SLO the scenario sets, the sequence-scheduling metrics
# of static-batch runs, the decoder metrics of runs that drafted tokens.
OPTIONAL_SUMMARY_KEYS = frozenset(
    (
        *_SLO_KEYS,
        *BATCH_METRICS,
        *_DECODER_KEYS,
        *_POSITION_KEYS,
        *APAR_SUMMARY_COLUMNS,
        *PIPELINE_SUMMARY_COLUMNS,
    )
)


def _summary_columns() -> dict[str, str]:
    """Every key `workbench.metrics.summarize` can return at its default percentiles, in
    the order it returns them."""
    columns = {
        "completed": "BIGINT",
        "num_requests": "BIGINT",
        "duration": "DOUBLE",
        "total_input_tokens": "BIGINT",
        "total_output_tokens": "BIGINT",
        "request_throughput": "DOUBLE",
        "output_throughput": "DOUBLE",
        "total_token_throughput": "DOUBLE",
    }
    for metric in LATENCY_METRICS:
        columns |= {f"{stat}_{metric}_ms": "DOUBLE" for stat in STATISTICS}
        columns[f"n_{metric}"] = "BIGINT"
    columns["request_goodput"] = "DOUBLE"
    columns |= dict.fromkeys(_SLO_KEYS, "DOUBLE")
    columns |= {"mean_tokens_per_emission": "DOUBLE", "mean_batch_size": "DOUBLE"}
    columns["preemptions"] = "BIGINT"
    columns |= {name: "DOUBLE" for name in BATCH_METRICS} | {"decode_iterations": "BIGINT"}
    columns |= dict.fromkeys((*_DECODER_KEYS, *_POSITION_KEYS), "DOUBLE")
    saturation_types = {"offered_request_rate": "DOUBLE", "saturated": "BOOLEAN"}
    saturation_types["saturation"] = "VARCHAR"
    columns |= {key: saturation_types[key] for key in SATURATION_KEYS}
    # Added by migrations, in their order: a migrated table appends them last.
    return columns | APAR_SUMMARY_COLUMNS | PIPELINE_SUMMARY_COLUMNS  # (v6, v7)


# Summary key → SQL type: the columns of `run_summaries` after `run_id` (schema 4).
SUMMARY_COLUMNS: dict[str, str] = _summary_columns()


def run_summaries_ddl() -> str:
    columns = ",\n    ".join(f"{name} {sql}" for name, sql in SUMMARY_COLUMNS.items())
    return f"CREATE TABLE run_summaries (\n    run_id VARCHAR PRIMARY KEY,\n    {columns}\n)"


@dataclass(frozen=True)
class PythonStep:
    """A migration step SQL cannot do; `workbench.store.db` knows each by its name."""

    name: str


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


# Schemas 1-3: the summary recomputed in SQL from request_metrics (completed requests only,
# like workbench.metrics.summarize; no ITL, goodput or SLO attainment).
RUN_SUMMARY_VIEW_V1 = f"""
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


# Schema 4: each run's identity, main configuration values and stored summary, one row per
# run: what `workbench summary RUN --json` prints, beside the configuration.
RUN_SUMMARY_VIEW = f"""
CREATE VIEW run_summary AS
SELECT
    runs.run_id, runs.label, runs.scenario_name, runs.backend, runs.decoder, runs.scheduler,
    {", ".join(f"runs.{name}" for name in CONFIG_COLUMNS)},
    runs.sweep_point, runs.started_at, runs.finished_at,
    epoch(runs.finished_at) - epoch(runs.started_at) AS wall_s,
    run_summaries.* EXCLUDE (run_id)
FROM runs LEFT JOIN run_summaries USING (run_id)
"""


def record_table_ddl(table: str) -> str:
    columns = ",\n    ".join(f"{name} {sql}" for name, sql in RECORD_TABLES[table].items())
    return f"CREATE TABLE {table} (\n    run_id VARCHAR NOT NULL,\n    {columns}\n)"


def create_statements() -> list[str]:
    """Everything a new database needs, in order (run inside one transaction)."""
    return [
        SCHEMA_VERSION_DDL,
        RUNS_DDL,
        *_runs_columns_v4(),
        *(record_table_ddl(table) for table in RECORD_TABLES),
        run_summaries_ddl(),
        REQUEST_METRICS_VIEW,
        RUN_SUMMARY_VIEW,
        *PROFILE_TABLES_DDL,
        BRANCH_TABLE_DDL,
        OUTPUTS_TABLE_DDL,
    ]


def schema_objects() -> set[str]:
    """The tables and views a current database holds (named by `create_statements`)."""
    pattern = re.compile(r"CREATE (?:TABLE|VIEW) (?:IF NOT EXISTS )?(\w+)")
    return {m.group(1) for sql in create_statements() for m in pattern.finditer(sql)}


def _runs_columns_v4() -> list[str]:
    label, label_type = LABEL_COLUMN
    added = [f"ALTER TABLE runs ADD COLUMN {label} {label_type}"]
    added += [f"ALTER TABLE runs ADD COLUMN {n} {t}" for n, (t, _) in CONFIG_COLUMNS.items()]
    return added


def fill_config_columns_sql(where: str = "") -> str:
    """The UPDATE that fills every config column of `runs` from config_json."""
    assignments = ", ".join(f"{name} = {config_column_sql(name)}" for name in CONFIG_COLUMNS)
    return f"UPDATE runs SET {assignments}{where}"


# Columns added since schema 1 that old databases derive from what they have: before v3,
# decoders verified 1 + drafted tokens per sequence (lookahead's window went unrecorded).
LEGACY_COLUMNS: dict[str, dict[str, str]] = {
    "steps": {"verified_tokens": "decode_tokens + drafted_tokens"},
    # Before v10 APAR branches emitted one token per step (no speculation).
    "branches": {"steps": "tokens"},
    # Before v4 the run's label and configuration values lived only in config_json.
    "runs": {
        LABEL_COLUMN[0]: f"NULL::{LABEL_COLUMN[1]}",
        **{name: config_column_sql(name) for name in CONFIG_COLUMNS},
    },
}

# version → steps upgrading a database from `version` to `version + 1`.
MIGRATIONS: dict[int, list[str | PythonStep]] = {
    1: [
        "ALTER TABLE requests ADD COLUMN category VARCHAR",
        "DROP VIEW run_summary",  # it reads request_metrics, which gains the column
        "DROP VIEW request_metrics",
        REQUEST_METRICS_VIEW,
        RUN_SUMMARY_VIEW_V1,
    ],
    2: [
        "ALTER TABLE steps ADD COLUMN verified_tokens BIGINT",
        f"UPDATE steps SET verified_tokens = {LEGACY_COLUMNS['steps']['verified_tokens']}",
    ],
    3: [
        *_runs_columns_v4(),
        fill_config_columns_sql(),
        run_summaries_ddl(),
        PythonStep("summarize_stored_runs"),  # ITL and goodput need the Python metrics
        "DROP VIEW run_summary",
        RUN_SUMMARY_VIEW,
    ],
    4: [*PROFILE_TABLES_DDL],  # calibration profiles: two new tables
    5: [  # APAR: branch trees, and their summary metrics
        BRANCH_TABLE_DDL,
        *(
            f"ALTER TABLE run_summaries ADD COLUMN IF NOT EXISTS {name} {sql}"
            for name, sql in APAR_SUMMARY_COLUMNS.items()
        ),
    ],
    6: [  # pipeline-parallel runs (PipeInfer): runs, wasted stage time, runs in flight
        f"ALTER TABLE run_summaries ADD COLUMN IF NOT EXISTS {name} {sql}"
        for name, sql in PIPELINE_SUMMARY_COLUMNS.items()
    ],
    7: [OUTPUTS_TABLE_DDL],  # what real runs answered
    # each profiled step's longest decode context (decode attention that pads) and idle time
    8: [
        "ALTER TABLE profile_points ADD COLUMN IF NOT EXISTS decode_context_max BIGINT DEFAULT 0",
        "ALTER TABLE profile_points ADD COLUMN IF NOT EXISTS idle_before_s DOUBLE DEFAULT 0",
    ],
    9: [  # APAR with speculation: a branch's emitting steps apart from its tokens
        "ALTER TABLE branches ADD COLUMN IF NOT EXISTS steps BIGINT",
        f"UPDATE branches SET steps = {LEGACY_COLUMNS['branches']['steps']}",
    ],
    # each step's time in the draft model's forwards; unknown (NULL) for the runs before
    10: ["ALTER TABLE steps ADD COLUMN IF NOT EXISTS draft_s DOUBLE"],
    # APAR forks computed in each profiled step's decode forward (0 for older profiles)
    11: ["ALTER TABLE profile_points ADD COLUMN IF NOT EXISTS decode_forks BIGINT DEFAULT 0"],
}
