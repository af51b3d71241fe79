"""Calibration profiles: what `workbench calibrate` measured on a real engine, step by step.

A profile is one row of `profiles` (the model, device, dtype, threads, versions and date of
the measurement) and its points in `profile_points`: one per engine step the calibration
ran, with the work the step computed (the simulator's `StepWork` fields) and the wall time
it took. The simulator's `calibrated` cost model fits itself to the points; an exported CSV
holds every point with its profile's columns beside it, so it carries the same facts.

Resumable: the points of each grid probe (one short serving run) are written in one
transaction as the probe ends, and a profile is `complete` once every probe is in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from workbench.errors import WorkbenchError
from workbench.store.ids import new_id
from workbench.store.schema import POINT_COLUMNS, PROFILE_COLUMNS

SINCE_SCHEMA_9 = ("decode_context_max", "idle_before_s")  # optional in older CSVs
SINCE_SCHEMA_12 = ("decode_forks",)  # and this one since schema 12
OPTIONAL_COLUMNS = (*SINCE_SCHEMA_9, *SINCE_SCHEMA_12)

# How the calibration grid measures verification steps, recorded in a profile's info:
# 0 (unrecorded, before 2026-11-27 evening): the probe kept its token without the acceptance
#   kernel a speculative step runs, and until that afternoon every verification ran over a
#   64-token prompt (the fit could not tell a verified token's keys from the token);
# 1: verifications over short, long and uneven contexts, through the same causal forward
#   and greedy acceptance kernel as a speculative chain.
VERIFY_REVISION = 1

INTEGER_FIELDS = (
    "step",
    "decode_batch_size",
    "decode_context_sum",
    "decode_context_max",
    "decode_extra_tokens",
    "decode_extra_context_sum",
    "decode_forks",
)


@dataclass(frozen=True)
class ProfilePoint:
    """One engine step: the work it computed (as `simulator.cost_models.base.StepWork`
    counts it) and what it cost. `step_s` runs from the end of the previous step's forward
    to the end of this one's, so it holds everything the engine does per step (scheduling,
    bookkeeping, the forwards); steps follow each other back to back in a probe."""

    probe: str
    step: int
    prefill_chunk_tokens: tuple[int, ...]
    prefill_context_tokens: tuple[int, ...]
    decode_batch_size: int
    decode_context_sum: int
    decode_extra_tokens: int
    decode_extra_context_sum: int
    forward_s: float
    step_s: float
    decode_context_max: int = 0  # 0 in profiles measured before schema 9: not known
    idle_before_s: float = 0.0  # how long the engine had slept before the step (schema 9)
    decode_forks: int = 0  # APAR forks' chunks among the decode's extra rows (schema 12)

    @property
    def kind(self) -> str:
        """decode | verify | fork | prefill | mixed: the step kinds the grid covers (fork: a
        decode or verify step whose forward computed APAR forks' chunks too)."""
        if self.prefill_chunk_tokens:
            return "mixed" if self.decode_batch_size else "prefill"
        if self.decode_forks:
            return "fork"
        return "verify" if self.decode_extra_tokens else "decode"

    def row(self, profile_id: str) -> list[Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("prefill_chunk_tokens", "prefill_context_tokens"):
            values[name] = " ".join(str(n) for n in values[name])
        return [profile_id, *(values[name] for name in list(POINT_COLUMNS)[1:])]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ProfilePoint:
        values = {f.name: row[f.name] for f in fields(cls) if f.name not in OPTIONAL_COLUMNS}
        for name in ("prefill_chunk_tokens", "prefill_context_tokens"):
            values[name] = tuple(int(n) for n in str(values[name] or "").split())
        values["decode_context_max"] = row.get("decode_context_max") or 0  # older CSVs lack it
        values["idle_before_s"] = float(row.get("idle_before_s") or 0.0)
        values["decode_forks"] = row.get("decode_forks") or 0  # 0 before schema 12
        for name in INTEGER_FIELDS:
            values[name] = int(values[name])
        return cls(**values)


@dataclass
class Profile:
    """A profile's identity and conditions (the `profiles` row)."""

    name: str
    model: str
    checkpoint: str
    model_shape: dict[str, int]
    device: str
    device_name: str
    dtype: str
    threads: int
    grid: str
    probes: int
    versions: dict[str, str] = field(default_factory=dict)
    git_sha: str | None = None
    created_at: float = 0.0  # unix seconds
    completed_at: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    profile_id: str = field(default_factory=new_id)

    @property
    def complete(self) -> bool:
        return self.completed_at is not None

    @property
    def kernels(self) -> str:
        """The kernel set measured; profiles begun before it was recorded ran the default of
        their day: Triton on CUDA, the plain references elsewhere."""
        recorded = self.info.get("kernels")
        if isinstance(recorded, str):
            return recorded
        return "triton" if self.device == "cuda" else "reference"

    @property
    def linear(self) -> str:
        """What ran the linear layers (`real_backend.model.inference_linear`); profiles begun
        before it was recorded ran the default of their day: oneDNN-prepacked weights for
        CPU fp32, `F.linear` elsewhere."""
        recorded = self.info.get("linear")
        if isinstance(recorded, str):
            return recorded
        return "onednn-prepacked" if (self.device, self.dtype) == ("cpu", "fp32") else "aten"

    @property
    def verify_revision(self) -> int:
        """How its verification steps were measured (`VERIFY_REVISION`); 0 if unrecorded."""
        recorded = self.info.get("verify_revision")
        return recorded if type(recorded) is int else 0  # (not a JSON true)

    def describe(self) -> str:
        """One line: what was measured where."""
        return (
            f"profile {self.name!r} ({self.profile_id}): {self.model} on {self.device} "
            f"({self.device_name}), {self.dtype}, {self.threads} threads"
        )

    def row(self) -> list[Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("model_shape", "versions", "info"):
            values[name] = json.dumps(values[name], sort_keys=True)
        for name in ("created_at", "completed_at"):
            values[name] = _to_utc(values[name])
        return [values[name] for name in PROFILE_COLUMNS]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Profile:
        values = {name: row[name] for name in PROFILE_COLUMNS}
        for name in ("model_shape", "versions", "info"):
            raw = values[name]
            values[name] = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
        for name in ("created_at", "completed_at"):
            values[name] = _from_utc(values[name])
        values["threads"], values["probes"] = int(values["threads"]), int(values["probes"])
        return cls(**values)


# ---------------------------------------------------------------- the store's accessors


def insert_profile(con: duckdb.DuckDBPyConnection, profile: Profile) -> None:
    marks = ", ".join("?" for _ in PROFILE_COLUMNS)
    con.execute(f"INSERT INTO profiles VALUES ({marks})", profile.row())


def insert_probe_points(
    con: duckdb.DuckDBPyConnection, profile_id: str, points: list[ProfilePoint]
) -> None:
    """One probe's points (the caller holds the transaction)."""
    marks = ", ".join("?" for _ in POINT_COLUMNS)
    con.executemany(
        f"INSERT INTO profile_points VALUES ({marks})", [p.row(profile_id) for p in points]
    )


def mark_complete(con: duckdb.DuckDBPyConnection, profile_id: str, when_s: float) -> None:
    con.execute(
        "UPDATE profiles SET completed_at = ? WHERE profile_id = ?", [_to_utc(when_s), profile_id]
    )


def select_profiles(con: duckdb.DuckDBPyConnection) -> list[Profile]:
    """Every profile, oldest first."""
    cursor = con.execute(
        f"SELECT {', '.join(PROFILE_COLUMNS)} FROM profiles ORDER BY created_at, profile_id"
    )
    return [Profile.from_row(dict(zip(PROFILE_COLUMNS, r, strict=True))) for r in cursor.fetchall()]


def select_points(con: duckdb.DuckDBPyConnection, profile_id: str) -> list[ProfilePoint]:
    present = {d[0] for d in con.execute("SELECT * FROM profile_points LIMIT 0").description}
    # a read-only open of a schema-8 database: the longest context was not recorded then
    names = ", ".join(n if n in present else f"0 AS {n}" for n in POINT_COLUMNS)
    rows = con.execute(
        f"SELECT {names} FROM profile_points WHERE profile_id = ? ORDER BY probe, step",
        [profile_id],
    ).fetchall()
    return [ProfilePoint.from_row(dict(zip(POINT_COLUMNS, r, strict=True))) for r in rows]


def probes_done(con: duckdb.DuckDBPyConnection, profile_id: str) -> set[str]:
    rows = con.execute(
        "SELECT DISTINCT probe FROM profile_points WHERE profile_id = ?", [profile_id]
    ).fetchall()
    return {r[0] for r in rows}


def find_profile(profiles: list[Profile], ref: str, source: str) -> Profile:
    """The profile named `ref` (the latest of that name), or with id / unique id prefix `ref`."""
    named = [p for p in profiles if p.name == ref]
    if named:
        return named[-1]
    matches = [p for p in profiles if p.profile_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(sorted({p.name for p in profiles})) or "none"
    if not matches:
        raise WorkbenchError(
            f"no calibration profile named {ref!r} (profiles here: {known}); make one with "
            "`workbench calibrate`",
            source=source,
            field="cost_model.profile",
        )
    raise WorkbenchError(
        f"profile id prefix {ref!r} is ambiguous ({len(matches)} profiles)",
        source=source,
        field="cost_model.profile",
    )


def export_csv_sql(profile_id: str, out: Path) -> str:
    """COPY every point of the profile, its profile's columns beside each, to a CSV file."""
    kept = ", ".join(f"profiles.{name}" for name in PROFILE_COLUMNS)
    points = ", ".join(f"profile_points.{name}" for name in list(POINT_COLUMNS)[1:])
    quoted = "'" + str(out).replace("'", "''") + "'"
    pid = "'" + profile_id.replace("'", "''") + "'"
    return (
        f"COPY (SELECT {kept}, {points} FROM profile_points JOIN profiles USING (profile_id) "
        f"WHERE profile_id = {pid} ORDER BY probe, step) TO {quoted} (HEADER, DELIMITER ',')"
    )


def read_csv_profile(path: Path) -> tuple[Profile, list[ProfilePoint]]:
    """A profile exported by `export_csv_sql`: its row (from the first line) and points."""
    if not path.is_file():
        raise WorkbenchError("no such profile CSV", source=str(path), field="cost_model.profile")
    con = duckdb.connect(":memory:")
    try:
        rel = con.sql(
            "SELECT * FROM read_csv(?, header = true, all_varchar = true)", params=[str(path)]
        )
        names = rel.columns
        rows = [dict(zip(names, r, strict=True)) for r in rel.fetchall()]
    except duckdb.Error as error:
        raise WorkbenchError(
            f"not a profile CSV: {error}", source=str(path), field="cost_model.profile"
        ) from None
    finally:
        con.close()
    required = [n for n in (*PROFILE_COLUMNS, *POINT_COLUMNS) if n not in OPTIONAL_COLUMNS]
    missing = [n for n in required if rows and n not in rows[0]]
    if not rows or missing:
        what = f"columns {missing} are missing" if rows else "it has no points"
        raise WorkbenchError(
            f"not a profile CSV written by `workbench calibrate --csv`: {what}",
            source=str(path),
            field="cost_model.profile",
        )
    return _profile_from_text(rows[0]), [_point_from_text(r) for r in rows]


def _profile_from_text(row: dict[str, str]) -> Profile:
    values: dict[str, Any] = dict(row)
    for name in ("created_at", "completed_at"):
        text = values[name]
        values[name] = datetime.fromisoformat(text) if text else None
    return Profile.from_row(values)


def _point_from_text(row: dict[str, str]) -> ProfilePoint:
    values: dict[str, Any] = dict(row)
    values["forward_s"], values["step_s"] = float(row["forward_s"]), float(row["step_s"])
    return ProfilePoint.from_row(values)


def _to_utc(unix_s: float | None) -> datetime | None:
    return None if unix_s is None else datetime.fromtimestamp(unix_s, UTC).replace(tzinfo=None)


def _from_utc(moment: datetime | None) -> float | None:
    return None if moment is None else moment.replace(tzinfo=UTC).timestamp()
