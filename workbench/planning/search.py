"""Searches over one configuration, as generators: each `yield` asks for a probe (a rate or
a replica count) and receives its verdict (True: the SLOs are met); the return value is the
answer. The planner drives many at once; each one's sequence of probes depends only on its
own verdicts, so the answers never depend on which probe finishes first.

Both rely on monotone structure, stated here once: a configuration that fails at rate r
fails above it, and more replicas never hurt at a fixed rate. Probes at different rates
share their random draws (arrival gaps scale with the rate, lengths stay), which keeps the
verdicts monotone in practice, not only in expectation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass

# Doubling from the start rate stops here: a configuration passing at this rate is
# reported as "at least" it.
MAX_RATE_PER_S = 1e5


@dataclass(frozen=True)
class RateAnswer:
    """The highest passing rate found and the lowest failing one (None: none found)."""

    passing: float | None
    failing: float | None


@dataclass(frozen=True)
class ReplicaAnswer:
    """The fewest replicas passing (None: none up to the bound), and why the search ended."""

    replicas: int | None
    failing: int  # the most replicas that failed (0: none did)
    pruned: bool = False  # stopped at the cost bound: cannot beat the best found


RateSearch = Generator[float, bool, RateAnswer]
ReplicaSearch = Generator[int, bool, ReplicaAnswer]


def max_rate(start: float, precision: float, min_rate: float) -> RateSearch:
    """Bracket the threshold by doubling or halving from `start`, then bisect (in log space)
    until passing and failing rates are within `precision` of each other."""
    passing: float | None = None
    failing: float | None = None
    rate = start
    while passing is None or failing is None:
        if (yield rate):
            passing = rate
            if rate >= MAX_RATE_PER_S:
                return RateAnswer(passing, None)
            rate = rate * 2 if failing is None else rate
        else:
            failing = rate
            if rate / 2 < min_rate:
                return RateAnswer(passing, failing)
            rate = rate / 2 if passing is None else rate
    while failing / passing > 1 + precision:
        rate = math.sqrt(passing * failing)
        if (yield rate):
            passing = rate
        else:
            failing = rate
    return RateAnswer(passing, failing)


def min_replicas(max_replicas: int, useful: Callable[[], int]) -> ReplicaSearch:
    """Gallop 1, 2, 4, ... until a count passes, then bisect down to the fewest passing.
    `useful()`: the most replicas that could still beat the best configuration found, read
    at every step (the bound tightens as other searches finish); the gallop never jumps
    past it."""
    failing, passing = 0, None
    count = 1
    while passing is None:
        cap = min(max_replicas, useful())
        if count > cap:
            return ReplicaAnswer(None, failing, pruned=cap < max_replicas)
        if (yield count):
            passing = count
        else:
            failing = count
            count = min(count * 2, cap) if count < cap else count + 1
    while passing - failing > 1:
        middle = (failing + passing) // 2
        if (yield middle):
            passing = middle
        else:
            failing = middle
    return ReplicaAnswer(passing, failing)
