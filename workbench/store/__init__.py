"""The DuckDB results store (see `db.ResultsStore`) and its schema."""

from __future__ import annotations

from workbench.store.db import ResultsStore

__all__ = ["ResultsStore"]
