"""Vidur-format profile CSVs: read only the needed columns, pick rows by key columns.

Shared by the profile-backed cost model (`vidur.py`) and the kernel fit
(`kernel_profiles.py`), which read the same files.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class ProfileTable:
    """The needed columns of a CSV, as strings, with where it came from."""

    source: str
    field: str
    columns: dict[str, list[str]]

    def numbers(self, name: str) -> np.ndarray:
        """The column as floats, an empty cell NaN; anything but a finite number >= 0 (token
        counts, sizes, kernel times) is refused with its row."""
        texts = self.columns[name]
        values = np.array([_float_or_nan(v) if v else np.nan for v in texts])  # (n,)
        given = np.array([v != "" for v in texts], dtype=bool)  # (n,)
        bad = given & ~(np.isfinite(values) & (values >= 0))  # "x", "nan", "-1", "inf"
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise WorkbenchError(
                f"column {name}, data row {row + 1}: expected a finite number >= 0, "
                f"got {texts[row]!r}",
                source=self.source,
                field=self.field,
            )
        return values

    def keep(self, mask: np.ndarray) -> ProfileTable:
        picked = {
            k: [v for v, m in zip(col, mask, strict=True) if m] for k, col in self.columns.items()
        }
        return ProfileTable(self.source, self.field, picked)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))


def read_profile_table(
    path: Path, field: str, required: list[str], optional: list[str]
) -> ProfileTable:
    """Read only the named columns (the attention file has 32, we need ~8)."""
    source = str(path)
    try:
        with path.open(newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise WorkbenchError(
                    "empty CSV (expected a Vidur profile)", source=source, field=field
                )
            index = {name: i for i, name in enumerate(header)}
            missing = [name for name in required if name not in index]
            if missing:
                raise WorkbenchError(
                    f"missing column(s) {', '.join(missing)} (not a Vidur profile of this kind?)",
                    source=source,
                    field=field,
                )
            wanted = [name for name in required + optional if name in index]
            picks = [index[name] for name in wanted]
            rows = [[row[i] for i in picks] for row in reader if row]
    except OSError as exc:
        raise WorkbenchError(f"cannot read ({exc.strerror})", source=source, field=field) from None
    except IndexError:
        raise WorkbenchError(
            "a row has fewer fields than the header", source=source, field=field
        ) from None
    columns = {name: [row[k] for row in rows] for k, name in enumerate(wanted)}
    return ProfileTable(source, field, columns)


def stat_column(op: str, statistic: str) -> str:
    return f"time_stats.{op}.{statistic}"


def select_rows(table: ProfileTable, expected: dict[str, int], what: str) -> ProfileTable:
    """Rows whose key columns equal `expected`; a clear error when none do."""
    mask = np.ones(len(table), dtype=bool)
    for key, value in expected.items():
        mask &= table.numbers(key) == value
    if mask.all():
        return table
    if mask.any():
        return table.keep(mask)
    found = {key: sorted({int(v) for v in table.numbers(key) if v == v}) for key in expected}
    wanted = ", ".join(f"{k}={v}" for k, v in expected.items())
    profiled = ", ".join(f"{k} in {v}" for k, v in found.items())
    raise WorkbenchError(
        f"no rows for {what} ({wanted}); the file has {profiled}",
        source=table.source,
        field=table.field,
    )


def op_column(table: ProfileTable, name: str) -> np.ndarray:
    if name not in table.columns:
        return np.zeros(len(table))
    return np.nan_to_num(table.numbers(name), nan=0.0)


def _float_or_nan(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")
