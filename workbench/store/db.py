"""The DuckDB results store: a run is written whole, in one transaction, or not at all.

Record columns go in as pyarrow tables built over the numpy arrays (no per-row Python), so
a million-request run writes in seconds. DuckDB allows one writing process per file: a
second one gets a clear `WorkbenchError` instead of DuckDB's lock message.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from workbench.apar_records import BranchRecords
from workbench.errors import WorkbenchError, check_output_file, first_line
from workbench.metrics import DEFAULT_PERCENTILES, SummaryValue
from workbench.records import (
    EmissionSpans,
    OutputRecords,
    RequestRecords,
    RunMeta,
    RunRecords,
    StepRecords,
)
from workbench.store import profiles as profile_sql
from workbench.store.interrupts import interrupts_held
from workbench.store.profiles import Profile, ProfilePoint
from workbench.store.schema import (
    BRANCH_COLUMNS,
    CONFIG_COLUMNS,
    LABEL_COLUMN,
    LEGACY_COLUMNS,
    MIGRATIONS,
    NUMPY_DTYPES,
    OLDEST_READABLE_VERSION,
    OPTIONAL_SUMMARY_KEYS,
    RECORD_TABLES,
    SCHEMA_VERSION,
    SUMMARY_COLUMNS,
    PythonStep,
    create_statements,
    fill_config_columns_sql,
    schema_objects,
)
from workbench.store.summaries import summarize_run, summary_row

MEMORY = ":memory:"
RUN_COLUMNS = [
    "run_id", "scenario_name", "scenario_hash", "config_json", "backend", "decoder",
    "scheduler", "seed", "versions", "git_sha", "started_at", "finished_at", "status",
    "sweep_point", "info",
]  # fmt: skip
# Read from `runs` beside RUN_COLUMNS (schema 4; derived for older databases).
RUN_EXTRA_COLUMNS = [LABEL_COLUMN[0], *CONFIG_COLUMNS]
EXPORTABLE = (
    "runs", *RECORD_TABLES, "branches", "outputs", "run_summaries", "request_metrics",
    "run_summary",
)  # fmt: skip
_RECORD_CLASSES = {"requests": RequestRecords, "steps": StepRecords, "emissions": EmissionSpans}
_COLUMNS = {**RECORD_TABLES, "branches": BRANCH_COLUMNS}  # tables write_run inserts
_NOT_OURS = "not a workbench results database"
# Errors write_run reports as one WorkbenchError after rolling back (bad records, bad JSON
# in RunMeta, a read-only database...); anything else (KeyboardInterrupt) propagates as is.
_WRITE_ERRORS = (WorkbenchError, pa.ArrowException, ValueError, TypeError, duckdb.Error)


class ResultsStore:
    """A handle on one results database. Use `ResultsStore.open(path)` as a context manager."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, path: str) -> None:
        self._con = connection
        self.path = path

    # ------------------------------------------------------------ opening and closing

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False) -> ResultsStore:
        """Open (or create) a results database; ":memory:" gives a private in-memory one."""
        label = str(path)
        con = _connect(label, read_only)
        try:
            _ensure_schema(con, label, read_only)
        except BaseException:
            con.close()
            raise
        return cls(con, label)

    @classmethod
    @contextlib.contextmanager
    def writing(cls, path: str | Path) -> Iterator[ResultsStore]:
        """Open (or create) the database of a command that writes: one this call created is
        removed again when the command fails before storing anything, so a refused run
        leaves no empty database behind."""
        created = str(path) != MEMORY and not os.path.lexists(path)
        store = cls.open(path)
        try:
            yield store
        except BaseException:
            empty = created and store._holds_nothing()
            store.close()
            if empty:
                for leftover in (Path(path), Path(f"{path}.wal")):
                    leftover.unlink(missing_ok=True)
            raise
        store.close()

    def _holds_nothing(self) -> bool:
        """No run and no calibration profile (a database that cannot tell is kept)."""
        try:
            runs = self._con.execute("SELECT count(*) FROM runs").fetchone()
            return runs is not None and runs[0] == 0 and not self.profiles()
        except Exception:  # an invalidated connection: keep the file, report the first error
            return False

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, for ad hoc SQL over the tables and views."""
        return self._con

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ writing

    def write_run(
        self,
        meta: RunMeta,
        records: RunRecords,
        *,
        summary: dict[str, SummaryValue] | None = None,
        label: str | None = None,
    ) -> str:
        """Write the run's row, its summary and all its records in one transaction; returns
        the run id.

        summary: `workbench.metrics.summarize` of these records under the run's SLOs at the
        default percentiles, when the caller has it already; computed here otherwise.
        label: the user's name for the run (`workbench run --label`). A Ctrl-C during the
        write is raised when it has ended (`interrupts_held`): the run is stored whole or not."""
        if self._con.execute("SELECT 1 FROM runs WHERE run_id = ?", [meta.run_id]).fetchall():
            raise WorkbenchError(
                f"run {meta.run_id!r} is already in the database", source=self.path
            )
        with interrupts_held():
            self._write_records(meta, records, summary, label)
        return meta.run_id

    def _write_records(
        self,
        meta: RunMeta,
        records: RunRecords,
        summary: dict[str, SummaryValue] | None,
        label: str | None,
    ) -> None:
        self._con.execute("BEGIN TRANSACTION")
        try:
            if summary is None:  # bad records fail here: rolled back, reported as below
                summary = summarize_run(records, meta.config_json)
            for table in RECORD_TABLES:
                self._insert_records(table, getattr(records, table), meta.run_id)
            if records.branches is not None:  # APAR runs
                self._insert_records("branches", records.branches, meta.run_id)
            if records.outputs is not None:  # real runs
                self._insert_outputs(records.outputs, meta.run_id)
            self._insert_run_row(meta, records.info, label)
            self._insert_summary(meta.run_id, summary)
            self._con.execute("COMMIT")
        except BaseException as error:
            self._rollback()
            if isinstance(error, _WRITE_ERRORS):
                raise WorkbenchError(
                    f"could not write run {meta.run_id!r} (nothing was written): {error}",
                    source=self.path,
                ) from error
            raise

    def _rollback(self) -> None:
        # The transaction may never have started, or DuckDB may have ended it already.
        with contextlib.suppress(duckdb.Error):
            self._con.execute("ROLLBACK")

    def _insert_records(self, table: str, columns: object, run_id: str) -> None:
        arrow = _arrow_table(table, columns)
        names = ", ".join(_COLUMNS[table])
        self._con.register("_wb_source", arrow)
        try:
            self._con.execute(
                f"INSERT INTO {table} SELECT ?::VARCHAR, {names} FROM _wb_source", [run_id]
            )
        finally:
            self._con.unregister("_wb_source")

    def _insert_outputs(self, outputs: OutputRecords, run_id: str) -> None:
        arrow = pa.Table.from_arrays(
            [
                pa.array(np.asarray(outputs.request_id, dtype=np.int64)),
                pa.array(outputs.token_ids, type=pa.list_(pa.int64())),
                pa.array(outputs.text, type=pa.string()),
            ],
            names=["request_id", "token_ids", "text"],
        )
        self._con.register("_wb_outputs", arrow)
        try:
            self._con.execute(
                "INSERT INTO outputs SELECT ?::VARCHAR, request_id, token_ids, text "
                "FROM _wb_outputs",
                [run_id],
            )
        finally:
            self._con.unregister("_wb_outputs")

    def _insert_run_row(self, meta: RunMeta, info: dict[str, str], label: str | None) -> None:
        row = [
            meta.run_id, meta.scenario_name, meta.scenario_hash, meta.config_json,
            meta.backend, meta.decoder, meta.scheduler, int(meta.seed),
            json.dumps(meta.versions, sort_keys=True), meta.git_sha,
            _to_utc(meta.started_at), _to_utc(meta.finished_at), "complete",
            meta.sweep_point, json.dumps(info, sort_keys=True), label,
        ]  # fmt: skip
        names = [*RUN_COLUMNS, LABEL_COLUMN[0]]
        marks = ", ".join("?" for _ in names)
        self._con.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES ({marks})", row)
        self._con.execute(fill_config_columns_sql(" WHERE run_id = ?"), [meta.run_id])

    def _insert_summary(self, run_id: str, summary: dict[str, SummaryValue]) -> None:
        values = [run_id, *summary_row(summary)]
        marks = ", ".join("?" for _ in values)
        self._con.execute(f"INSERT INTO run_summaries VALUES ({marks})", values)

    # ------------------------------------------------------------ reading

    def list_runs(self) -> list[dict[str, Any]]:
        """Every run's row (see `get_run`), oldest first."""
        rows = self._con.execute(
            f"SELECT {self.run_columns_sql()} FROM runs ORDER BY started_at, run_id"
        ).fetchall()
        return [_run_dict(row) for row in rows]

    def run_columns_sql(self) -> str:
        """The SELECT list of a `runs` row: RUN_COLUMNS and RUN_EXTRA_COLUMNS, derived from
        config_json where an older (read-only) database lacks them."""
        present = self._table_columns("runs")
        legacy = LEGACY_COLUMNS["runs"]
        extra = [
            name if name in present else f"{legacy[name]} AS {name}" for name in RUN_EXTRA_COLUMNS
        ]
        return ", ".join([*RUN_COLUMNS, *extra])

    def resolve_run_id(self, run_id: str) -> str:
        """The full run id for an id or a unique prefix of one."""
        if not run_id:
            raise WorkbenchError("expected a run id or a prefix of one, got ''", source=self.path)
        matches = [
            r[0]
            for r in self._con.execute(
                "SELECT run_id FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id", [run_id]
            ).fetchall()
        ]
        if run_id in matches:
            return run_id
        if not matches:
            raise WorkbenchError(f"no run with id or prefix {run_id!r}", source=self.path)
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise WorkbenchError(
                f"run id prefix {run_id!r} is ambiguous: it matches {shown}", source=self.path
            )
        return matches[0]

    def get_run(self, run_id: str) -> dict[str, Any]:
        """The run's row: RunMeta's fields (times as unix seconds) plus `status`, `info`,
        `label` and the configuration columns (`schema.CONFIG_COLUMNS`)."""
        full = self.resolve_run_id(run_id)
        rows = self._con.execute(
            f"SELECT {self.run_columns_sql()} FROM runs WHERE run_id = ?", [full]
        ).fetchall()
        return _run_dict(rows[0])  # resolve_run_id found it

    def run_summary(
        self, run_id: str, percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    ) -> dict[str, SummaryValue]:
        """The run's summary, as `workbench run --json` printed it: stored since schema 4 (at
        the default percentiles); recomputed from the records for other percentiles or an
        older database opened read-only."""
        full = self.resolve_run_id(run_id)
        if tuple(percentiles) == DEFAULT_PERCENTILES:
            stored = self._stored_summary(full)
            if stored is not None:
                return stored
        run = self.get_run(full)
        return summarize_run(self.load_records(full), run["config_json"], tuple(percentiles))

    def _stored_summary(self, run_id: str) -> dict[str, SummaryValue] | None:
        if not self._table_columns("run_summaries"):
            return None
        names = list(SUMMARY_COLUMNS)
        rows = self._con.execute(
            f"SELECT {', '.join(names)} FROM run_summaries WHERE run_id = ?", [run_id]
        ).fetchall()
        if not rows:
            return None
        stored = dict(zip(names, rows[0], strict=True))
        # Keys a run's kind never has (decoder metrics of a vanilla run...) are NULL here
        # and absent from summarize's dict; keys it always has stay, None or not.
        return {k: v for k, v in stored.items() if v is not None or k not in OPTIONAL_SUMMARY_KEYS}

    def load_records(self, run_id: str) -> RunRecords:
        """The run's records as written (same columns, dtypes and row order)."""
        full = self.resolve_run_id(run_id)
        parts = {table: self._load_table(table, full) for table in RECORD_TABLES}
        info = self.get_run(full)["info"]
        records = RunRecords(parts["requests"], parts["steps"], parts["emissions"], info)
        records.branches = self._load_branches(full)
        records.outputs = self.load_outputs(full)
        return records

    def load_outputs(self, run_id: str) -> OutputRecords | None:
        """What a real run answered, in request order (None for simulated runs, and before
        schema 8)."""
        if not self._table_columns("outputs"):
            return None
        rows = self._con.execute(
            "SELECT request_id, token_ids, text FROM outputs WHERE run_id = ? ORDER BY request_id",
            [self.resolve_run_id(run_id)],
        ).fetchall()
        if not rows:
            return None
        ids, tokens, texts = zip(*rows, strict=True)
        token_ids = [list(t) for t in tokens]
        return OutputRecords(np.asarray(ids, dtype=np.int64), token_ids, list(texts))

    def _load_branches(self, run_id: str) -> BranchRecords | None:
        """An APAR run's branch trees (None for other runs, and before schema 6)."""
        present = self._table_columns("branches")
        if not present:
            return None
        legacy = {n: e for n, e in LEGACY_COLUMNS["branches"].items() if n not in present}
        names = ", ".join(f"{legacy[n]} AS {n}" if n in legacy else n for n in BRANCH_COLUMNS)
        arrow = self._con.sql(
            f"SELECT {names} FROM branches WHERE run_id = ?", params=[run_id]
        ).to_arrow_table()
        if arrow.num_rows == 0:
            return None
        return BranchRecords(
            **{
                name: np.asarray(arrow.column(name).to_numpy(), dtype=NUMPY_DTYPES[sql])
                for name, sql in BRANCH_COLUMNS.items()
            }
        )

    def _load_table(self, table: str, run_id: str) -> object:
        present = self._table_columns(table)
        legacy = {n: e for n, e in LEGACY_COLUMNS.get(table, {}).items() if n not in present}
        present |= set(legacy)  # derived from older columns (read-only, older database)
        columns = {n: t for n, t in RECORD_TABLES[table].items() if n in present}
        selected = ", ".join(f"{legacy[n]} AS {n}" if n in legacy else n for n in columns)
        # Without ORDER BY DuckDB keeps insertion order (preserve_insertion_order is on).
        arrow = self._con.sql(
            f"SELECT {selected} FROM {table} WHERE run_id = ?", params=[run_id]
        ).to_arrow_table()
        arrays = {
            name: np.asarray(arrow.column(name).to_numpy(), dtype=NUMPY_DTYPES[sql_type])
            for name, sql_type in columns.items()
        }  # NULL doubles come back as NaN
        for name, sql_type in RECORD_TABLES[table].items():
            if name not in present:  # added since this (read-only, older) database's schema
                null = None if sql_type == "VARCHAR" else np.nan
                arrays[name] = np.full(arrow.num_rows, null, dtype=NUMPY_DTYPES[sql_type])
        return _RECORD_CLASSES[table](**arrays)

    def _table_columns(self, table: str) -> set[str]:
        rows = self._con.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name = ?",
            [table],
        ).fetchall()
        return {r[0] for r in rows}

    def completed_hashes(self) -> set[str]:
        """scenario_hash of every complete run: what a resumed sweep may skip."""
        return set(self.completed_runs_by_hash())

    def completed_runs_by_hash(self) -> dict[str, list[str]]:
        """scenario_hash → ids of the complete runs of that configuration, oldest first."""
        rows = self._con.execute(
            "SELECT scenario_hash, run_id FROM runs WHERE status = 'complete' "
            "ORDER BY started_at, run_id"
        ).fetchall()
        runs: dict[str, list[str]] = {}
        for scenario_hash, run_id in rows:
            runs.setdefault(scenario_hash, []).append(run_id)
        return runs

    def export_parquet(self, table: str, out_path: str | Path, run_id: str | None = None) -> Path:
        """Copy a table or view (optionally one run's rows) to a Parquet file."""
        if table not in EXPORTABLE:
            raise WorkbenchError(f"unknown table {table!r}; expected one of {EXPORTABLE}")
        out = check_output_file(Path(out_path))
        where = ""
        if run_id is not None:
            where = f" WHERE run_id = {_sql_literal(self.resolve_run_id(run_id))}"
        sql = f"COPY (SELECT * FROM {table}{where}) TO {_sql_literal(str(out))} (FORMAT parquet)"
        _write_file(self._con, sql, out, "Parquet")
        return out

    # ------------------------------------------------------------ calibration profiles

    def profiles(self) -> list[Profile]:
        """Every calibration profile, oldest first (none in a database older than schema 5)."""
        if not self._table_columns("profiles"):
            return []
        return profile_sql.select_profiles(self._con)

    def find_profile(self, ref: str) -> Profile:
        """The profile named `ref` (the latest of that name) or with id (prefix) `ref`."""
        return profile_sql.find_profile(self.profiles(), ref, self.path)

    def profile_points(self, profile_id: str) -> list[ProfilePoint]:
        return profile_sql.select_points(self._con, profile_id)

    def profile_probes_done(self, profile_id: str) -> set[str]:
        """The grid probes whose points are stored (a resumed calibration skips them)."""
        return profile_sql.probes_done(self._con, profile_id)

    def add_profile(self, profile: Profile) -> None:
        profile_sql.insert_profile(self._con, profile)

    def write_probe(self, profile_id: str, points: list[ProfilePoint], *, last: bool) -> None:
        """One probe's points in one transaction; `last`: the profile is complete with them."""
        self._con.execute("BEGIN TRANSACTION")
        try:
            profile_sql.insert_probe_points(self._con, profile_id, points)
            if last:
                profile_sql.mark_complete(self._con, profile_id, datetime.now(UTC).timestamp())
            self._con.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def export_profile_csv(self, profile_id: str, out_path: str | Path) -> Path:
        """Every point of the profile, its profile's columns beside each, as CSV."""
        out = check_output_file(Path(out_path))
        _write_file(self._con, profile_sql.export_csv_sql(profile_id, out), out, "CSV")
        return out


# ---------------------------------------------------------------- helpers


def _write_file(con: duckdb.DuckDBPyConnection, sql: str, out: Path, kind: str) -> None:
    """Run a `COPY ... TO` statement; a place the OS will not write is a one-line error."""
    try:
        con.execute(sql)
    except duckdb.IOException as error:  # a read-only folder, a special file
        raise WorkbenchError(
            f"could not write the {kind} file: {first_line(error)}", source=str(out)
        ) from None


def _connect(label: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    if label != MEMORY:
        path = Path(label)
        if not path.parent.is_dir():
            raise WorkbenchError(f"folder {str(path.parent)!r} does not exist", source=label)
        if path.is_dir():
            raise WorkbenchError("is a folder, expected a results database file", source=label)
        if read_only and not path.exists():
            raise WorkbenchError("no such results database", source=label)
    try:
        return duckdb.connect(label, read_only=read_only)
    except duckdb.Error as error:
        message = str(error)
        if "lock" in message.lower():
            raise WorkbenchError(
                "the database is open for writing in another process (DuckDB allows one "
                f"writer); close it and retry ({message})",
                source=label,
            ) from error
        if isinstance(error, duckdb.IOException) and _unwritable(message):
            purpose = "reading" if read_only else "writing"
            raise WorkbenchError(
                f"cannot open the database for {purpose}: {first_line(error)}", source=label
            ) from error
        raise WorkbenchError(
            f"{_NOT_OURS} (not a DuckDB file, or corrupt): {message}", source=label
        ) from error


def _unwritable(message: str) -> bool:
    """DuckDB's IO error for a file the OS will not open as asked (not a bad file)."""
    reasons = (
        "Permission denied",
        "Operation not permitted",
        "Read-only file system",
        "No such file or directory",  # a folder where files cannot be made (/proc)
    )
    return any(reason in message for reason in reasons)


def _ensure_schema(con: duckdb.DuckDBPyConnection, label: str, read_only: bool) -> None:
    """Create the schema in an empty database, migrate an old one, refuse a foreign one."""
    try:
        tables = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
            ).fetchall()
        }
    except duckdb.Error as error:
        raise WorkbenchError(f"{_NOT_OURS} (corrupt): {error}", source=label) from error
    if not tables and not read_only:
        _run_in_transaction(con, [*create_statements(), _version_insert(SCHEMA_VERSION)], label)
        return
    if "schema_version" not in tables:
        raise WorkbenchError(f"{_NOT_OURS} (it has no schema_version table)", source=label)
    (version,) = con.execute("SELECT max(version) FROM schema_version").fetchall()[0]
    found = int(version) if version is not None else 0
    if found > SCHEMA_VERSION:
        raise WorkbenchError(
            f"written by a newer workbench (schema {found}, this one reads {SCHEMA_VERSION})",
            source=label,
        )
    if found < SCHEMA_VERSION and not (read_only and found >= OLDEST_READABLE_VERSION):
        _migrate(con, label, found, read_only)
    elif found == SCHEMA_VERSION:
        _check_complete(tables, label)


def _check_complete(tables: set[str], label: str) -> None:
    """A current database has every table and view (information_schema lists both): one
    someone dropped a part of is refused whole, not met later as a raw SQL error."""
    missing = sorted(schema_objects() - tables)
    if missing:
        raise WorkbenchError(
            f"a damaged results database: it lacks {', '.join(missing)}", source=label
        )


def _migrate(con: duckdb.DuckDBPyConnection, label: str, found: int, read_only: bool) -> None:
    missing = [v for v in range(found, SCHEMA_VERSION) if v not in MIGRATIONS]
    if missing or read_only:
        raise WorkbenchError(
            f"schema version {found} cannot be upgraded to {SCHEMA_VERSION}"
            + (" when opened read-only" if read_only and not missing else ""),
            source=label,
        )
    steps = [step for v in range(found, SCHEMA_VERSION) for step in MIGRATIONS[v]]
    _run_in_transaction(con, [*steps, _version_insert(SCHEMA_VERSION)], label)


def _summarize_stored_runs(con: duckdb.DuckDBPyConnection, label: str) -> None:
    """Fill run_summaries for the runs of an older database: their records and SLOs give
    exactly what `workbench run` would have stored."""
    store = ResultsStore(con, label)
    for (run_id,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall():
        try:
            summary = store.run_summary(run_id)
        except WorkbenchError as error:
            raise WorkbenchError(
                f"cannot upgrade to schema 4 (nothing changed): run {run_id!r} does not "
                f"summarize: {error.one_line()}",
                source=label,
            ) from None
        store._insert_summary(run_id, summary)


_PYTHON_STEPS = {"summarize_stored_runs": _summarize_stored_runs}


def _version_insert(version: int) -> str:
    return f"INSERT INTO schema_version VALUES ({int(version)}, now()::TIMESTAMP)"


def _run_in_transaction(
    con: duckdb.DuckDBPyConnection, steps: list[str | PythonStep], label: str
) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        for step in steps:
            if isinstance(step, PythonStep):
                _PYTHON_STEPS[step.name](con, label)
            else:
                con.execute(step)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _arrow_table(table: str, records: object) -> pa.Table:
    """A pyarrow table over the record arrays: numeric columns are not copied; NaN → NULL."""
    arrays = []
    for name, sql_type in _COLUMNS[table].items():
        values = getattr(records, name)
        if sql_type == "VARCHAR":
            arrays.append(pa.array(np.asarray(values, dtype=object), type=pa.string()))
            continue
        column = np.ascontiguousarray(values, dtype=NUMPY_DTYPES[sql_type])
        arrays.append(pa.array(column, from_pandas=sql_type == "DOUBLE"))
    lengths = {len(a) for a in arrays}
    if len(lengths) > 1:
        raise WorkbenchError(f"{table} columns have different lengths {sorted(lengths)}")
    return pa.Table.from_arrays(arrays, names=list(_COLUMNS[table]))


def _run_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    run = dict(zip([*RUN_COLUMNS, *RUN_EXTRA_COLUMNS], row, strict=True))
    run["versions"] = json.loads(run["versions"]) if run["versions"] else {}
    run["info"] = json.loads(run["info"]) if run["info"] else {}
    run["started_at"] = _from_utc(run["started_at"])
    run["finished_at"] = _from_utc(run["finished_at"])
    return run


def _to_utc(unix_s: float | None) -> datetime | None:
    return None if unix_s is None else datetime.fromtimestamp(unix_s, UTC).replace(tzinfo=None)


def _from_utc(moment: datetime | None) -> float | None:
    return None if moment is None else moment.replace(tzinfo=UTC).timestamp()


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run_wall_s(run: dict[str, Any]) -> float | None:
    """How long a run took on the wall clock, from its `get_run` row."""
    started, finished = run.get("started_at"), run.get("finished_at")
    return None if started is None or finished is None else float(finished) - float(started)


def run_meta_from_row(run: dict[str, Any]) -> RunMeta:
    """The RunMeta a `get_run` dict was written from."""
    return RunMeta(**{f.name: run[f.name] for f in fields(RunMeta)})
