"""What an engine spends per step, measured alike on both backends.

A step's wall time is the time from the end of the step before it (on the same replica) to
its own end: its forwards plus the engine's scheduling and bookkeeping around them (the
real engine's recorded `duration_s` holds its forwards only). That holds for a step that
followed the previous one back to back: one whose replica still had a request arrived and
unfinished when the previous step ended. A step after an idle spell (nothing to run until
an arrival) is left out: its wait is the workload's, not the engine's. The simulator's
steps follow each other back to back whenever they have work, so there the same rule gives
each busy step's priced duration.

A speculative step's draft forwards (`draft_s`) are measured alike: the real engine times
its proposals, the simulator records the draft's priced share of each step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.records import RunRecords

# A request that finished in step i carries the step's end as its finish time; a rebuilt
# end (start + duration) may differ from it in the last bits.
TIME_SLACK_S = 1e-9


@dataclass(frozen=True)
class StepWalls:
    seconds: np.ndarray  # (k,) float64: wall time of each back-to-back step
    with_prefill: np.ndarray  # (k,) bool: the step computed prompt tokens
    steps: int  # every step of the run, busy or not
    draft: DraftTimes | None = None  # a drafting run's draft forwards, where recorded


@dataclass(frozen=True)
class DraftTimes:
    """The draft model's forwards over the steps that drafted."""

    per_step_s: float  # mean draft time of a step that drafted
    per_token_s: float  # summed draft time over summed drafted tokens


def draft_times(records: RunRecords) -> DraftTimes | None:
    """None: no draft model ran (nothing drafted, or drafted without one: lookahead's
    candidates), or the steps did not record their draft time (before schema 11)."""
    steps = records.steps
    drafted = steps.drafted_tokens > 0  # (s,)
    seconds = steps.draft_s[drafted]
    if not (seconds > 0).any() or not np.isfinite(seconds).all():
        return None
    per_token = float(seconds.sum() / steps.drafted_tokens[drafted].sum())
    return DraftTimes(float(seconds.mean()), per_token)


def step_walls(records: RunRecords) -> StepWalls:
    steps, requests = records.steps, records.requests
    seconds, prefill = [], []
    for replica in np.unique(steps.replica):
        rows = np.flatnonzero(steps.replica == replica)
        rows = rows[np.argsort(steps.start_s[rows], kind="stable")]
        ends = steps.start_s[rows] + steps.duration_s[rows]  # (n,)
        mine = requests.replica == replica
        arrived = np.sort(requests.arrival_s[mine])
        finished = np.sort(requests.finish_s[mine][np.isfinite(requests.finish_s[mine])])
        previous = ends[:-1] + TIME_SLACK_S  # (n - 1,)
        outstanding = np.searchsorted(arrived, previous, side="right") - np.searchsorted(
            finished, previous, side="right"
        )
        busy = outstanding > 0
        seconds.append(np.diff(ends)[busy])
        prefill.append(steps.prefill_tokens[rows][1:][busy] > 0)
    if not seconds:
        return StepWalls(np.zeros(0), np.zeros(0, dtype=bool), 0)
    draft = draft_times(records)
    return StepWalls(np.concatenate(seconds), np.concatenate(prefill), len(steps.step), draft)
