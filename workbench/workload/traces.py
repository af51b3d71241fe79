"""Read numeric columns from CSV tables (with a header) and JSON lists of records.

Tables are parsed once per process and cached by path, modification time and size, so a
sweep that reads the same trace for every point pays for parsing once. Returned arrays are
read-only views of the cache: index or copy them, never write into them.
"""

from __future__ import annotations

import csv
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class Table:
    """A parsed file: raw cell values by column, and where each row came from."""

    columns: dict[str, list[object]]
    row_lines: list[int] | None  # CSV line number of each data row; None for JSON records

    def where(self, row: int) -> str:
        """Point a reader at one row: a line for CSV, a 0-based record index for JSON."""
        if self.row_lines is None:
            return f"record {row}"
        return f"line {self.row_lines[row]}"


def read_column(path: str | Path, column: str) -> np.ndarray:
    """Column `column` of a CSV or JSON file as finite float64 values. # (rows,)"""
    path = Path(path)
    return _read_column_cached(*_cache_key(path), column)


def read_lengths(path: str | Path, column: str) -> np.ndarray:
    """Column `column` as token counts: whole numbers >= 1, as int64. # (rows,)"""
    path = Path(path)
    return _read_lengths_cached(*_cache_key(path), column)


def read_ranked_rows(path: str | Path, column: str) -> np.ndarray:
    """Indices of the rows holding a value in `column`, in ascending order of that value.

    A blank CSV field or a missing/null JSON value leaves its row out (a subset); the
    values must be distinct whole numbers (ranks). # (k,) int64
    """
    path = Path(path)
    return _read_ranked_cached(*_cache_key(path), column)


def read_table(path: str | Path) -> Table:
    """The whole file, parsed (cached)."""
    path = Path(path)
    return _read_table_cached(*_cache_key(path))


# ------------------------------------------------------------------ cached layers


def _cache_key(path: Path) -> tuple[str, int, int]:
    """The file's identity for the cache: an edited file is read again."""
    try:
        stat = path.stat()
    except OSError:
        raise WorkbenchError("file not found", source=str(path)) from None
    if not path.is_file():
        raise WorkbenchError("expected a file, found a directory", source=str(path))
    return str(path), stat.st_mtime_ns, stat.st_size  # the path as given names it in errors


@functools.lru_cache(maxsize=16)
def _read_table_cached(path: str, mtime_ns: int, size: int) -> Table:
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return _parse_csv(path)
    if suffix == ".json":
        return _parse_json(path)
    raise WorkbenchError(
        f"expected a .csv or .json file, got {suffix or 'no suffix'!r}", source=path
    )


@functools.lru_cache(maxsize=64)
def _read_column_cached(path: str, mtime_ns: int, size: int, column: str) -> np.ndarray:
    table = _read_table_cached(path, mtime_ns, size)
    values = _to_float(table, _column(table, column, path), path, column)  # (rows,)
    values.setflags(write=False)
    return values


@functools.lru_cache(maxsize=64)
def _read_lengths_cached(path: str, mtime_ns: int, size: int, column: str) -> np.ndarray:
    table = _read_table_cached(path, mtime_ns, size)
    values = _read_column_cached(path, mtime_ns, size, column)  # (rows,) float64
    _check_positive_whole(table, values, path, column)
    lengths = values.astype(np.int64)  # (rows,)
    lengths.setflags(write=False)
    return lengths


@functools.lru_cache(maxsize=16)
def _read_ranked_cached(path: str, mtime_ns: int, size: int, column: str) -> np.ndarray:
    table = _read_table_cached(path, mtime_ns, size)
    cells = _column(table, column, path)
    rows = [i for i, cell in enumerate(cells) if cell not in ("", None)]
    if not rows:
        raise WorkbenchError("column has no values", source=path, field=column)
    ranks = np.array([_rank(table, cells[i], i, path, column) for i in rows])  # (k,)
    order = np.argsort(ranks, kind="stable")
    same = np.flatnonzero(np.diff(ranks[order]) == 0)
    if len(same):
        a, b = rows[order[same[0]]], rows[order[same[0] + 1]]
        raise WorkbenchError(
            f"rank {ranks[order[same[0]]]} appears twice ({table.where(a)} and "
            f"{table.where(b)}); expected distinct ranks",
            source=path,
            field=column,
        )
    ranked = np.array(rows, dtype=np.int64)[order]  # (k,)
    ranked.setflags(write=False)
    return ranked


def _rank(table: Table, cell: object, row: int, path: str, column: str) -> int:
    value = float(cell) if _is_number(cell) else float("nan")  # type: ignore[arg-type]
    if not (np.isfinite(value) and value == round(value)):
        raise WorkbenchError(
            f"expected a whole number (a rank) or an empty cell at {table.where(row)}, "
            f"got {cell!r}",
            source=path,
            field=column,
        )
    return int(value)


# ------------------------------------------------------------------ parsing


def _parse_csv(path: str) -> Table:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            raise WorkbenchError("empty CSV file: expected a header row", source=path)
        rows: list[list[str]] = []
        lines: list[int] = []
        for row in reader:
            if not row:
                continue  # blank line
            if len(row) != len(header):
                raise WorkbenchError(
                    f"line {reader.line_num} has {len(row)} fields, the header has {len(header)}",
                    source=path,
                )
            rows.append(row)
            lines.append(reader.line_num)
    names = [h.strip() for h in header]
    cells = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return Table(columns={n: list(c) for n, c in zip(names, cells, strict=True)}, row_lines=lines)


def _parse_json(path: str) -> Table:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise WorkbenchError(
            f"malformed JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})", source=path
        ) from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise WorkbenchError("expected a JSON list of records (objects)", source=path)
    keys: dict[str, None] = {}
    for record in data:
        keys.update(dict.fromkeys(record))
    columns = {k: [record.get(k) for record in data] for k in keys}
    return Table(columns=columns, row_lines=None)


def _column(table: Table, column: str, path: str) -> list[object]:
    if column not in table.columns:
        known = ", ".join(repr(c) for c in table.columns) or "none"
        raise WorkbenchError(
            f"no column {column!r}; the columns are {known}", source=path, field=column
        )
    return table.columns[column]


# ------------------------------------------------------------------ validation


def _to_float(table: Table, cells: list[object], path: str, column: str) -> np.ndarray:
    if not cells:
        raise WorkbenchError("column has no values", source=path, field=column)
    flag = next((i for i, c in enumerate(cells) if isinstance(c, bool)), None)  # JSON true/false
    try:
        if flag is not None:
            raise ValueError  # numpy would read true as 1.0
        values = np.array(cells, dtype=np.float64)  # (rows,)
    except (ValueError, TypeError):
        bad = next(i for i, c in enumerate(cells) if not _is_number(c))
        raise WorkbenchError(
            f"expected a number at {table.where(bad)}, got {cells[bad]!r}",
            source=path,
            field=column,
        ) from None
    finite = np.isfinite(values)
    if not finite.all():
        bad = int(np.argmin(finite))
        got = "nothing (missing or null)" if cells[bad] is None else repr(cells[bad])
        raise WorkbenchError(
            f"expected a finite number at {table.where(bad)}, got {got}",
            source=path,
            field=column,
        )
    return values


def _is_number(cell: object) -> bool:
    if isinstance(cell, bool) or cell is None:
        return False
    try:
        float(cell)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def _check_positive_whole(table: Table, values: np.ndarray, path: str, column: str) -> None:
    bad = (values < 1) | (values != np.round(values))  # (rows,)
    if bad.any():
        i = int(np.argmax(bad))
        raise WorkbenchError(
            f"expected a whole number of tokens >= 1 at {table.where(i)}, got {values[i]:g}",
            source=path,
            field=column,
        )
