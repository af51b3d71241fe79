"""Stop a probe whose failure is already certain (the simulator's `RunMonitor`).

A percentile q over n requests (linear interpolation) exceeds a limit as soon as
n − floor((n − 1) q) requests exceed it, whatever the others do. Requests are counted as
over a limit only when that is definite: TTFT and E2E once their deadline (arrival + limit)
passes without a first token or an end, TPOT when the request ends. Attainment fails once
more than (1 − a) n requests have missed some limit; the overload guard once more than 1 %
have waited past `overload_ttft_s`. So a stopped probe would have failed had it run to the
end: early stopping never changes a verdict (tests check it on grids).
"""

from __future__ import annotations

import math

import numpy as np

from workbench.planning.slo import OVERLOAD_SHARE, exceeds
from workbench.recorder import Recorder
from workbench.scenario.plan import PlanSLO


class Deadline:
    """Requests (in arrival order) whose `column` event (first token or finish) came more
    than `limit_s` after arrival, judged once each when that is certain: once the event is
    known, or once `limit_s` (and a nanosecond, clear of rounding) has passed without it."""

    def __init__(self, limit_s: float, column: str) -> None:
        self.limit_s = limit_s
        self.column = column
        self.next = 0  # first request not yet judged

    def newly_missed(self, recorder: Recorder, now_s: float) -> list[int]:
        arrival = recorder.arrival_s
        event = getattr(recorder, self.column)
        missed = []
        while self.next < len(arrival) and now_s - arrival[self.next] > self.limit_s + 1e-9:
            i = self.next
            if np.isnan(event[i]) or exceeds(event[i] - arrival[i], self.limit_s):
                missed.append(i)
            self.next += 1
        return missed


def allowed_misses(n: int, percentile: float) -> int:
    """Requests over a limit that still leave the percentile under it (one more fails)."""
    return n - math.floor((n - 1) * percentile / 100) - 1


class SloMonitor:
    def __init__(self, slo: PlanSLO, num_requests: int) -> None:
        self.slo = slo
        self.n = num_requests
        limits = slo.limits()
        self.deadlines = {
            name: Deadline(limits[name].max_ms / 1e3, column)
            for name, column in (("ttft", "first_token_s"), ("e2e", "finish_s"))
            if name in limits
        }
        self.overload = Deadline(slo.overload_ttft_s, "first_token_s")
        self.misses = dict.fromkeys(limits, 0)
        self.missed_any = np.zeros(num_requests, dtype=bool)
        self.overloaded = 0

    def after_arrivals(self, recorder: Recorder, now_s: float) -> str | None:
        for name, deadline in self.deadlines.items():
            for i in deadline.newly_missed(recorder, now_s):
                self._miss(name, i)
        self.overloaded += len(self.overload.newly_missed(recorder, now_s))
        return self._verdict(now_s)

    def after_finish(self, recorder: Recorder, request_id: int, now_s: float) -> str | None:
        limit = self.slo.tpot
        tokens = int(recorder.output_tokens[request_id])
        if limit is not None and tokens > 1:
            first_s = recorder.first_token_s[request_id]
            tpot_s = (
                (now_s - recorder.arrival_s[request_id])
                - (first_s - recorder.arrival_s[request_id])
            ) / (tokens - 1)
            if exceeds(tpot_s, limit.max_ms / 1e3):
                self._miss("tpot", request_id)
        return self._verdict(now_s)

    def _miss(self, name: str, request_id: int) -> None:
        self.misses[name] += 1
        self.missed_any[request_id] = True

    def _verdict(self, now_s: float) -> str | None:
        for name, limit in self.slo.limits().items():
            if self.misses[name] > allowed_misses(self.n, limit.percentile):
                return (
                    f"p{limit.percentile:g} {name.upper()} lost at t={now_s:.1f} s: "
                    f"{self.misses[name]} of {self.n} requests over {limit.max_ms:g} ms"
                )
        if self.slo.attainment is not None:
            missed = int(self.missed_any.sum())
            if missed > (1 - self.slo.attainment) * self.n:
                return f"attainment lost at t={now_s:.1f} s: {missed} of {self.n} missed"
        if self.overloaded > OVERLOAD_SHARE * self.n:
            return (
                f"overloaded at t={now_s:.1f} s: {self.overloaded} requests waited over "
                f"{self.slo.overload_ttft_s:g} s"
            )
        return None
