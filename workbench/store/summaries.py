"""A run's summary as the store keeps it: `workbench.metrics.summarize` under the run's own
SLOs, one `run_summaries` column per key (`schema.SUMMARY_COLUMNS`)."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from workbench.errors import WorkbenchError
from workbench.metrics import DEFAULT_PERCENTILES, SummaryValue, summarize
from workbench.records import RunRecords
from workbench.scenario.system import SLOConfig
from workbench.store.schema import SUMMARY_COLUMNS

# Latency keys of percentiles other than the stored ones: recomputed on demand, not kept.
_SELECTABLE_PERCENTILE = re.compile(r"^p[0-9.]+_(ttft|tpot|itl|e2el)_ms$")


def config_dict(config_json: str | None) -> dict[str, Any]:
    """The parsed configuration, or {} when it is missing or unreadable."""
    try:
        config = json.loads(config_json or "")
    except (TypeError, json.JSONDecodeError):
        return {}
    return config if isinstance(config, dict) else {}


def run_slo(config: dict[str, Any]) -> SLOConfig | None:
    """The run's SLOs, or None when the stored configuration has none (or unreadable ones)."""
    try:
        return SLOConfig.model_validate(config.get("slo") or {})
    except ValidationError:
        return None


def summarize_run(
    records: RunRecords,
    config_json: str | None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
) -> dict[str, SummaryValue]:
    """The run's summary under the SLOs of its stored configuration."""
    return summarize(records, run_slo(config_dict(config_json)), percentiles)


def summary_row(summary: dict[str, SummaryValue]) -> list[SummaryValue]:
    """The values of every `run_summaries` column, in order (NULL for keys a run lacks).

    A key with no column is a new metric without a schema migration: refused, so that no
    metric is silently left out of the database."""
    unknown = [
        key
        for key in summary
        if key not in SUMMARY_COLUMNS and not _SELECTABLE_PERCENTILE.match(key)
    ]
    if unknown:
        raise WorkbenchError(
            f"summary keys {unknown} have no column in run_summaries: add them to "
            "workbench.store.schema.SUMMARY_COLUMNS with a migration"
        )
    return [summary.get(key) for key in SUMMARY_COLUMNS]
