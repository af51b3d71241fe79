"""The workbench from Python: scenarios in, results out as polars DataFrames.

    import workbench as wb

    scenario = wb.load_scenario("scenarios/quickstart.yaml", {"workload.num_requests": 500})
    run = wb.run(scenario, db="runs.duckdb")  # a Run: run_id, summary (the CLI's --json keys)
    results = wb.open("runs.duckdb")
    results.summary()  # one row per run: configuration + summary
    results.requests(run=run)  # one row per request, latencies in seconds
    wb.run_sweep(scenario_with_a_sweep, db="runs.duckdb").summary()  # one row per point

Every table comes back as a polars DataFrame straight from DuckDB (`.to_pandas()` gives
pandas, with the `pandas` extra). Column names carry their units (`_s`, `_ms`, `_tokens`);
`docs/results.md` describes every one. A database given by path is opened for each call
and closed again, so a notebook never holds the file's lock between cells; ":memory:" keeps
one private in-memory database open in the `Results` object.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import duckdb

from workbench.errors import WorkbenchError, first_line
from workbench.metrics import DEFAULT_PERCENTILES, SummaryValue
from workbench.scenario.loader import apply_override, read_yaml, set_dotted, validate_scenario
from workbench.scenario.scenario import Scenario
from workbench.store.db import MEMORY, ResultsStore, run_wall_s
from workbench.store.schema import CONFIG_COLUMNS, SUMMARY_COLUMNS

if TYPE_CHECKING:
    import polars as pl

    from workbench.runner import RunOutcome

DEFAULT_DB = "workbench.duckdb"
# The run_summary view's leading columns: who the run is and its main configuration.
IDENTITY_COLUMNS = ["run_id", "label", "scenario_name", "backend", "decoder", "scheduler"]
_POLARS_TYPES = {"BIGINT": "Int64", "INTEGER": "Int32", "DOUBLE": "Float64"}
_POLARS_TYPES |= {"VARCHAR": "String", "BOOLEAN": "Boolean"}


# ---------------------------------------------------------------------- scenarios


def load_scenario(
    path: str | Path, overrides: Mapping[str, Any] | Sequence[str] | None = None
) -> Scenario:
    """Read and validate a scenario file, as `workbench run FILE --set ...` does.

    overrides: {dotted.path: value} with Python values, or the CLI's "dotted.path=yaml"
    strings; e.g. {"workload.arrival.rate_per_s": 8, "decoder": {"kind": "vanilla"}}."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path: expected a scenario file's path, got {path!r}")
    path = Path(path)
    data = read_yaml(path)
    if isinstance(overrides, str | bytes) or not isinstance(overrides, Iterable | None):
        raise TypeError(
            f"overrides: expected a mapping or a list of 'dotted.path=value', got {overrides!r}"
        )
    if isinstance(overrides, Mapping):
        for dotted, value in overrides.items():
            set_dotted(data, str(dotted), _plain(value), source=str(path))
    else:
        for item in overrides or []:
            apply_override(data, str(item), source=str(path))
    return validate_scenario(data, source=str(path), base_dir=path.parent)


def _plain(value: Any) -> Any:
    """JSON-like data (a Path becomes its string), as a YAML file would give."""
    return json.loads(json.dumps(value, default=str))


# ---------------------------------------------------------------------- running


@dataclass(frozen=True)
class Run:
    """One stored run: its id and summary (the keys `workbench run --json` prints)."""

    run_id: str
    summary: dict[str, SummaryValue]
    scenario: Scenario  # the point's effective scenario
    results: Results  # the database it is in
    label: str | None = None
    sweep_point: dict[str, Any] = field(default_factory=dict)  # dotted path → value
    skipped: bool = False  # a sweep point found complete in the database, not run again
    wall_s: float | None = None  # how long it ran on the wall clock (None when skipped)

    @property
    def saturated(self) -> bool:
        """The engine did not keep up with the arrivals (`workbench.metrics.saturation`)."""
        return bool(self.summary.get("saturated"))

    def requests(self) -> pl.DataFrame:
        return self.results.requests(run=self.run_id)

    def steps(self) -> pl.DataFrame:
        return self.results.steps(run=self.run_id)

    def emissions(self) -> pl.DataFrame:
        return self.results.emissions(run=self.run_id)

    def outputs(self) -> pl.DataFrame:
        return self.results.outputs(run=self.run_id)


@dataclass(frozen=True)
class Sweep:
    """The runs of a scenario's sweep, one per grid point, in grid order."""

    runs: list[Run]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def summary(self) -> pl.DataFrame:
        """One row per point: the swept values (one column per dotted path), then the
        runs' `Results.summary` columns."""
        import polars as pl

        if not self.runs:
            return pl.DataFrame()
        results = self.runs[0].results
        summary = results.summary(run=self.runs)
        points = pl.DataFrame(
            [{"run_id": run.run_id, **run.sweep_point} for run in self.runs],
            infer_schema_length=None,
        )
        return points.join(summary, on="run_id", how="left", maintain_order="left")


def run(
    scenario: Scenario | str | Path,
    *,
    backend: str | None = None,
    db: str | Path | Results = DEFAULT_DB,
    label: str | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> Run:
    """Run a scenario (without a sweep) and store it in `db`; `wb.run_sweep` runs a sweep.

    backend: "sim" or "real", overriding the scenario's. db: a results database path, or a
    `Results` (e.g. `wb.open(":memory:")`). percentiles: the summary's `p{q}` keys."""
    scenario = _scenario(scenario, backend)
    if scenario.sweep is not None:
        raise WorkbenchError(
            "the scenario has a sweep: wb.run_sweep(...) runs every point", field="sweep"
        )
    (only,) = _execute(scenario, db, label, _percentiles(percentiles))
    return only


def run_sweep(
    scenario: Scenario | str | Path,
    *,
    backend: str | None = None,
    db: str | Path | Results = DEFAULT_DB,
    label: str | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> Sweep:
    """Run every point of the scenario's sweep not yet complete in `db` (as `workbench run`
    does: complete points are skipped, their stored runs returned)."""
    scenario = _scenario(scenario, backend)
    return Sweep(_execute(scenario, db, label, _percentiles(percentiles)))


def _percentiles(values: Iterable[float]) -> tuple[float, ...]:
    """Latency percentiles besides the median, as the CLI's --percentiles takes them (any
    iterable of real numbers: a tuple, a list, a NumPy array)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"percentiles: expected numbers like (90, 99), got {values!r}")
    listed = list(values)
    if not all(_is_real(q) for q in listed):
        raise TypeError(f"percentiles: expected numbers like (90, 99), got {values!r}")
    if not all(0 <= q <= 100 for q in listed):  # p0 and p100: the least and the most
        raise ValueError(f"percentiles: expected numbers from 0 to 100, got {values!r}")
    return tuple(float(q) for q in listed)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _scenario(scenario: Scenario | str | Path, backend: str | None) -> Scenario:
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if backend is None:
        return scenario
    data = scenario.model_dump(mode="json")
    data["backend"] = backend
    return validate_scenario(
        data, source=f"{scenario.name} (backend={backend})", base_dir=Path("/")
    )


def _execute(
    scenario: Scenario, db: str | Path | Results, label: str | None, percentiles: tuple[float, ...]
) -> list[Run]:
    from workbench.runner import run_scenario

    results = db if isinstance(db, Results) else Results(db, must_exist=False)
    with results.store(write=True) as store:
        outcomes = run_scenario(
            scenario, store, source=scenario.name, label=label, percentiles=percentiles
        )
    return [_run_of(outcome, results) for outcome in outcomes]


def _run_of(outcome: RunOutcome, results: Results) -> Run:
    return Run(
        run_id=outcome.run_id,
        summary=outcome.summary,
        scenario=outcome.point.scenario,
        results=results,
        label=outcome.label,
        sweep_point=dict(outcome.point.values),
        skipped=outcome.skipped,
        wall_s=outcome.wall_s,
    )


# ---------------------------------------------------------------------- reading


def open(db: str | Path = DEFAULT_DB) -> Results:  # wb.open, as duckdb.connect or polars
    """The results in a database, as polars DataFrames (see `Results`)."""
    return Results(db)


class Results:
    """Read a results database as polars DataFrames.

    Each method takes `run`: a run id or unique prefix, a `Run`, a list of them, or None
    for every run."""

    def __init__(self, db: str | Path, *, must_exist: bool = True) -> None:
        """must_exist: refuse a path with no database (wb.run creates one instead)."""
        if not isinstance(db, str | os.PathLike):
            raise TypeError(f"db: expected a database path or ':memory:', got {db!r}")
        self.path = str(db)
        self._closed = False
        # ":memory:" lives as long as its one connection: kept open here.
        self._memory = ResultsStore.open(MEMORY) if self.path == MEMORY else None
        if must_exist and self._memory is None and not Path(self.path).exists():
            raise WorkbenchError("no such results database", source=self.path)

    def close(self) -> None:
        """Close the kept in-memory database (its contents go with it); a file's `Results`
        opens the file per call, so it stays usable."""
        if self._memory is not None:
            self._closed = True
            self._memory.close()

    def __enter__(self) -> Results:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Results({self.path!r})"

    @contextmanager
    def store(self, *, write: bool = False) -> Iterator[ResultsStore]:
        """The database as a `ResultsStore`, for a `with` block: the kept in-memory store,
        or the file opened now (for writing, one made here is removed again if nothing gets
        stored: `ResultsStore.writing`)."""
        if self._closed:
            raise WorkbenchError("these results were closed: wb.open() again", source=self.path)
        if self._memory is not None:
            yield self._memory
            return
        opened = (
            ResultsStore.writing(self.path)
            if write
            else ResultsStore.open(self.path, read_only=True)
        )
        with opened as store:
            yield store

    # ------------------------------------------------------------ tables

    def runs(self) -> pl.DataFrame:
        """The `runs` table: one row per run, oldest first (configuration columns included,
        derived from `config_json` for databases older than schema 4)."""
        with self.store() as store:
            query = f"SELECT {store.run_columns_sql()} FROM runs ORDER BY started_at, run_id"
            return store.connection.sql(query).pl()

    def summary(
        self, run: Any = None, *, percentiles: Sequence[float] = DEFAULT_PERCENTILES
    ) -> pl.DataFrame:
        """One row per run: who it is, its main configuration values and every summary key
        (the `run_summary` view; percentiles other than the stored ones are recomputed from
        the records, as `workbench summary --percentiles` does)."""
        percentiles = _percentiles(percentiles)
        with self.store() as store:
            ids = self._run_ids(store, run)
            stored = percentiles == DEFAULT_PERCENTILES and "run_summaries" in _tables(store)
            if stored:
                return _select(store, "run_summary", ids)
            return _computed_summary(store, ids, percentiles)

    def requests(self, run: Any = None) -> pl.DataFrame:
        """One row per request with its latencies (the `request_metrics` view)."""
        with self.store() as store:
            return _select(store, "request_metrics", self._run_ids(store, run))

    def steps(self, run: Any = None) -> pl.DataFrame:
        """One row per engine step and replica (the `steps` table)."""
        with self.store() as store:
            return _select(store, "steps", self._run_ids(store, run))

    def emissions(self, run: Any = None) -> pl.DataFrame:
        """Emission spans: a request emitting `tokens_per_step` at the end of each step
        first_step..last_step of its replica (the `emissions` table)."""
        with self.store() as store:
            return _select(store, "emissions", self._run_ids(store, run))

    def outputs(self, run: Any = None) -> pl.DataFrame:
        """What real runs answered: per request its emitted token ids and their text (the
        `outputs` table; simulated runs have none)."""
        with self.store() as store:
            tables = store.connection.sql(
                "SELECT table_name FROM information_schema.tables WHERE table_name = 'outputs'"
            ).fetchall()
            if not tables:  # a database older than schema 8, opened read-only
                import polars as pl

                return pl.DataFrame(
                    schema={"run_id": pl.String, "request_id": pl.Int64,
                            "token_ids": pl.List(pl.Int64), "text": pl.String}
                )  # fmt: skip
            return _select(store, "outputs", self._run_ids(store, run))

    def sql(self, query: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        """Any SQL over the tables and views, as a DataFrame."""
        if not isinstance(query, str):
            raise TypeError(f"query: expected SQL text, got {query!r}")
        with self.store() as store:
            try:
                return store.connection.sql(query, params=params).pl()
            except duckdb.Error as error:  # DuckDB's own message, first line
                raise WorkbenchError(f"SQL: {first_line(error)}", source=self.path) from None

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _run_ids(store: ResultsStore, run: Any) -> list[str] | None:
        if run is None:
            return None
        many = isinstance(run, Iterable) and not isinstance(run, str | bytes)
        selected = list(run) if many else [run]  # a list, tuple, set, Series of ids
        if not all(_is_run_id(item) for item in selected):
            raise TypeError(
                f"run: expected a run id or prefix, a Run, or a list of them, got {run!r}"
            )
        return [
            store.resolve_run_id(item.run_id if isinstance(item, Run) else str(item))  # int: digits
            for item in selected
        ]


def _is_run_id(item: object) -> bool:
    """A run id or prefix (text, or an all-digit id a notebook passed as a number), or a Run."""
    return isinstance(item, str | numbers.Integral | Run) and not isinstance(item, bool)


def _tables(store: ResultsStore) -> set[str]:
    rows = store.connection.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
    ).fetchall()
    return {r[0] for r in rows}


def _select(store: ResultsStore, table: str, ids: list[str] | None) -> pl.DataFrame:
    """The table's rows (of the given runs, in the order given), in stored order."""
    import polars as pl

    if ids is None:
        return store.connection.sql(f"SELECT * FROM {table}").pl()
    frame = store.connection.sql(
        f"SELECT * FROM {table} WHERE list_contains(?, run_id)", params=[ids]
    ).pl()
    position = pl.col("run_id").replace_strict(
        {run_id: i for i, run_id in enumerate(ids)}, return_dtype=pl.Int64
    )
    return frame.sort(position, maintain_order=True)


def _computed_summary(
    store: ResultsStore, ids: list[str] | None, percentiles: tuple[float, ...]
) -> pl.DataFrame:
    """The run_summary rows computed from the records (other percentiles, or an older
    database read as it is)."""
    import polars as pl

    runs = store.list_runs() if ids is None else [store.get_run(i) for i in dict.fromkeys(ids)]
    rows = []
    for run in runs:
        identity = {name: run.get(name) for name in [*IDENTITY_COLUMNS, *CONFIG_COLUMNS]}
        identity["sweep_point"] = run.get("sweep_point")
        identity["wall_s"] = run_wall_s(run)
        rows.append(identity | store.run_summary(run["run_id"], percentiles))
    frame = pl.DataFrame(rows, infer_schema_length=None)
    types = {n: t for n, (t, _) in CONFIG_COLUMNS.items()} | SUMMARY_COLUMNS
    casts = [
        pl.col(name).cast(getattr(pl, _POLARS_TYPES[types[name]]))
        for name in frame.columns
        if name in types
    ]
    return frame.with_columns(casts) if casts else frame
