"""Whether a run's records show an overloaded engine, whose latencies then measure a queue.

An open-loop run offered more than its engine serves has no steady state: the queue grows
until the arrivals stop, so its TTFT and E2E depend on how long the run lasted rather than
on the configuration alone. Three signs, read from the request records:

- served well under offered: over the second half of the arrival window, requests
  completed at under 90% of the rate they arrived (judged with at least 100 arrivals
  there, so that Poisson noise stays near 10%);
- a queue growing to the end: the requests waiting for their first token, averaged at the
  arrivals of the last quarter, are at least 1.5 times and 10 more than at the arrivals of
  the second quarter (the first quarter is the warm-up of an empty engine);
- a storm of preemptions: at least 0.5 per request.

Closed-loop and batch workloads have no arrival window; they are judged on preemptions.
The thresholds are heuristics: a short run at the edge of capacity may go either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.records import RequestRecords

SERVED_SHARE_MIN = 0.9
MIN_ARRIVALS_JUDGED = 100
QUEUE_GROWTH_FACTOR = 1.5
QUEUE_GROWTH_MIN_REQUESTS = 10.0
PREEMPTIONS_PER_REQUEST_MAX = 0.5
# Summary keys this module adds (workbench.metrics.summarize), with their meaning.
SATURATION_KEYS = ("offered_request_rate", "saturated", "saturation")


@dataclass
class Saturation:
    offered_request_rate: float | None  # arrivals / s over the arrival window; None: closed
    reasons: list[str] = field(default_factory=list)  # each sign found, as a phrase

    @property
    def saturated(self) -> bool:
        return bool(self.reasons)

    def as_summary(self) -> dict[str, float | bool | str | None]:
        return {
            "offered_request_rate": self.offered_request_rate,
            "saturated": self.saturated,
            "saturation": "; ".join(self.reasons),
        }


def detect_saturation(requests: RequestRecords) -> Saturation:
    arrival = np.asarray(requests.arrival_s, dtype=np.float64)  # (n,)
    n = len(arrival)
    preemptions = int(np.asarray(requests.preemptions, dtype=np.int64).sum())
    reasons = []
    windowed = n >= 2 and np.all(np.isfinite(arrival)) and np.ptp(arrival) > 0
    offered = (n - 1) / float(np.ptp(arrival)) if windowed else None
    if windowed:
        order = np.argsort(arrival, kind="stable")
        first = _times(requests.first_token_s)[order]  # (n,) inf: never started
        finish = _times(np.where(requests.status == "finished", requests.finish_s, np.nan))
        reasons += _served_shortfall(arrival[order], finish[order])
        reasons += _growing_queue(arrival[order], first)
    if n and preemptions >= PREEMPTIONS_PER_REQUEST_MAX * n:
        reasons.append(f"{preemptions} preemptions ({preemptions / n:.2f} per request)")
    return Saturation(offered, reasons)


def _times(values: np.ndarray) -> np.ndarray:
    """Event times with NaN (never happened) as +inf, so that counts by time stay right."""
    times = np.asarray(values, dtype=np.float64)
    return np.where(np.isnan(times), np.inf, times)


def _served_shortfall(arrival: np.ndarray, finish: np.ndarray) -> list[str]:
    """Completions against arrivals over the second half of the arrival window.

    arrival: (n,) sorted; finish: (n,) in the same order, +inf when unfinished."""
    start, end = (arrival[0] + arrival[-1]) / 2.0, arrival[-1]
    arrived = int(np.count_nonzero(arrival >= start))
    if arrived < MIN_ARRIVALS_JUDGED:
        return []
    completed = int(np.count_nonzero((finish >= start) & (finish <= end)))
    share = completed / arrived
    if share >= SERVED_SHARE_MIN:
        return []
    span = end - start
    return [
        f"served {completed / span:.3g} of {arrived / span:.3g} req/s offered over the second "
        f"half of the arrivals ({100 * share:.0f}%)"
    ]


def _growing_queue(arrival: np.ndarray, first_token: np.ndarray) -> list[str]:
    """Requests waiting for their first token, seen by each arrival, early against late.

    arrival: (n,) sorted; first_token: (n,) in the same order, +inf when never started."""
    n = len(arrival)
    started_by = np.searchsorted(np.sort(first_token), arrival, side="right")  # (n,)
    waiting = np.arange(1, n + 1) - started_by  # (n,) arrived (itself included), not started
    early = waiting[n // 4 : n // 2]
    late = waiting[(3 * n) // 4 :]
    if len(early) == 0 or len(late) == 0:
        return []
    before, after = float(early.mean()), float(late.mean())
    grows = after >= QUEUE_GROWTH_FACTOR * before and after - before >= QUEUE_GROWTH_MIN_REQUESTS
    if not grows:
        return []
    return [f"waiting queue grew from {before:.0f} to {after:.0f} requests by the last arrivals"]
