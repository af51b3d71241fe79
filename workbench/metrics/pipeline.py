"""Metrics of pipeline-parallel runs (decoder kinds `pipeline` and `pipeinfer`), from the
run log the real backend keeps in `info["pipeline_runs"]` (one entry per run: launch and
return times, outcome, each stage's time and status). TTFT, TPOT and ITL per request come
from the records as for every run (`workbench.metrics`).

- pipeline_runs_launched / _committed / _discarded / _cancelled: runs by outcome (committed:
  extended the output; discarded: came back whole but could no longer help; cancelled:
  stopped early, skipped or abandoned by the stages it had not left yet).
- pipeline_stage_busy_s: time the stages spent computing runs, summed over stages.
- pipeline_wasted_whole_s / pipeline_wasted_partial_s: of it, spent on runs that did not
  commit: stages that computed such a run whole, and stages that abandoned it between
  layers when its cancel arrived; pipeline_wasted_share: both over the busy time.
- pipeline_mean_runs_in_flight / pipeline_max_runs_in_flight: runs between launch and
  return, time-weighted over the run's duration (first arrival to last finish), and most.
- pipeline_stage_utilization: busy time over stages × duration.
- pipeline_draft_s: the head's time drafting (PipeInfer).
"""

from __future__ import annotations

import json

import numpy as np

from workbench.records import RunRecords

Number = float | int | None

# Every key `pipeline_summary` returns → its SQL type, for the results store's
# `run_summaries` table (optional keys: NULL for runs without pipeline stages).
PIPELINE_SUMMARY_COLUMNS: dict[str, str] = {
    "pipeline_stages": "BIGINT",
    "pipeline_runs_launched": "BIGINT",
    "pipeline_runs_committed": "BIGINT",
    "pipeline_runs_discarded": "BIGINT",
    "pipeline_runs_cancelled": "BIGINT",
    "pipeline_stage_busy_s": "DOUBLE",
    "pipeline_wasted_whole_s": "DOUBLE",
    "pipeline_wasted_partial_s": "DOUBLE",
    "pipeline_wasted_share": "DOUBLE",
    "pipeline_mean_runs_in_flight": "DOUBLE",
    "pipeline_max_runs_in_flight": "BIGINT",
    "pipeline_stage_utilization": "DOUBLE",
    "pipeline_draft_s": "DOUBLE",
}


def has_pipeline_runs(records: RunRecords) -> bool:
    return "pipeline_runs" in records.info


def pipeline_summary(records: RunRecords) -> dict[str, Number]:
    runs = json.loads(records.info["pipeline_runs"])
    outcome = np.asarray(runs["outcome"], dtype=object)
    stage_s = np.asarray(runs["stage_s"], dtype=np.float64).reshape(len(outcome), -1)  # (r, P)
    status = np.asarray(runs["stage_status"], dtype=object).reshape(stage_s.shape)
    wasted = (outcome != "committed")[:, None]  # (r, 1)
    busy = float(stage_s.sum())
    whole = float(stage_s[wasted & (status == "computed")].sum())
    partial = float(stage_s[wasted & (status == "aborted")].sum())
    duration = _duration(records)
    mean_in_flight, max_in_flight = _in_flight(runs["launched_s"], runs["resolved_s"], duration)
    return {
        "pipeline_stages": stage_s.shape[1],
        "pipeline_runs_launched": len(outcome),
        "pipeline_runs_committed": int((outcome == "committed").sum()),
        "pipeline_runs_discarded": int((outcome == "discarded").sum()),
        "pipeline_runs_cancelled": int((outcome == "cancelled").sum()),
        "pipeline_stage_busy_s": busy,
        "pipeline_wasted_whole_s": whole,
        "pipeline_wasted_partial_s": partial,
        "pipeline_wasted_share": (whole + partial) / busy if busy > 0 else None,
        "pipeline_mean_runs_in_flight": mean_in_flight,
        "pipeline_max_runs_in_flight": max_in_flight,
        "pipeline_stage_utilization": _utilization(busy, stage_s.shape[1], duration),
        "pipeline_draft_s": float(records.info.get("pipeline_draft_s", 0.0)),
    }


def runs_in_flight(
    launched_s: list[float], resolved_s: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    """The step function of runs in flight: (times, runs in flight from each time on)."""
    times = np.concatenate([launched_s, resolved_s])  # (2r,)
    change = np.concatenate([np.ones(len(launched_s)), -np.ones(len(resolved_s))])
    order = np.lexsort((change, times))  # at equal times, returns before launches
    return times[order], np.cumsum(change[order])


def _in_flight(
    launched_s: list[float], resolved_s: list[float], span: tuple[float, float]
) -> tuple[Number, Number]:
    if not launched_s:
        return None, None
    times, level = runs_in_flight(launched_s, resolved_s)
    start, end = span
    if end <= start:
        return None, int(level.max())
    edges = np.clip(np.append(times, end), start, end)  # (2r + 1,)
    mean = float(np.dot(level, np.diff(edges)) / (end - start))
    return mean, int(level.max())


def _utilization(busy_s: float, stages: int, span: tuple[float, float]) -> Number:
    start, end = span
    return busy_s / (stages * (end - start)) if end > start else None


def _duration(records: RunRecords) -> tuple[float, float]:
    """First arrival and last finish (the span throughput is measured over)."""
    r = records.requests
    finished = ~np.isnan(np.asarray(r.finish_s, dtype=np.float64))
    if not finished.any():
        return 0.0, 0.0
    return float(np.nanmin(r.arrival_s)), float(np.nanmax(r.finish_s[finished]))
