"""Arrival processes: when each request is sent. One sampler per `kind`, chosen by a registry.

Conventions shared by every open-loop kind:
- The first request arrives at t = 0 and the n - 1 gaps that follow are drawn from the
  process, so a stream starts at once (as a trace replay does, after its shift to 0) and the
  mean gap is exactly the process's mean gap. For Poisson this is the process seen from an
  arrival (its Palm version); the gaps are still i.i.d. exponential.
- Gaps are never clipped: a Poisson or gamma stream keeps its long quiet spells and its
  near-simultaneous bursts; unless Poisson's `max_gap_mean_gaps` asks for Vidur's cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.scenario.workload import (
    ArrivalConfig,
    BatchArrivals,
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
    TraceArrivals,
)
from workbench.workload.traces import read_column, read_table


@dataclass(frozen=True)
class Arrivals:
    """Arrival times, plus the client model when arrivals are closed-loop."""

    arrival_s: np.ndarray  # (n,) float64, non-decreasing from 0; NaN for closed loop
    closed_loop_concurrency: int | None = None
    think_time_s: float = 0.0


ArrivalSampler = Callable[[Any, int, np.random.Generator], Arrivals]


# Times are float seconds: past 2**30 s (34 years) a float64 holds them to 0.2 µs or worse,
# and latencies of a few ms lose their digits. A stream that long is a mistaken rate.
MAX_ARRIVAL_S = 2.0**30


def sample_arrivals(config: ArrivalConfig, n: int, rng: np.random.Generator) -> Arrivals:
    """Arrivals of `n` requests under `config`, drawing only from `rng`."""
    arrivals = ARRIVAL_SAMPLERS[config.kind](config, n, rng)
    last = float(arrivals.arrival_s[-1]) if len(arrivals.arrival_s) else 0.0
    if last > MAX_ARRIVAL_S:  # NaN: a closed loop, timed as it runs
        raise WorkbenchError(
            f"the last request would arrive at {last:.3g} s, past {MAX_ARRIVAL_S:.3g} s (34 "
            "years), where float seconds lose a latency's digits: expected a higher rate (or a "
            "smaller trace time_scale)",
            field="workload.arrival",
        )
    return arrivals


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    """Arrival times starting at 0 from the n - 1 gaps between them. # (n,)"""
    return np.concatenate(([0.0], np.cumsum(gaps)))


def poisson_arrivals(config: PoissonArrivals, n: int, rng: np.random.Generator) -> Arrivals:
    mean_gap_s = 1.0 / config.rate_per_s
    gaps = rng.exponential(mean_gap_s, size=n - 1)  # (n-1,)
    if config.max_gap_mean_gaps is not None:
        gaps = np.minimum(gaps, config.max_gap_mean_gaps * mean_gap_s)
    return Arrivals(_from_gaps(gaps))


def gamma_arrivals(config: GammaArrivals, n: int, rng: np.random.Generator) -> Arrivals:
    # shape k = 1/cv², scale θ = cv²/rate: mean kθ = 1/rate, std √k·θ = cv/rate.
    cv2 = config.cv**2
    gaps = rng.gamma(shape=1.0 / cv2, scale=cv2 / config.rate_per_s, size=n - 1)  # (n-1,)
    return Arrivals(_from_gaps(gaps))


def constant_arrivals(config: ConstantArrivals, n: int, rng: np.random.Generator) -> Arrivals:
    # i / rate rather than a cumulative sum: no rounding drift over long streams.
    return Arrivals(np.arange(n, dtype=np.float64) / config.rate_per_s)


def trace_arrivals(config: TraceArrivals, n: int, rng: np.random.Generator) -> Arrivals:
    """Replay a trace's arrival times, shifted to start at 0 and with gaps scaled by time_scale.

    A trace of m arrivals that is shorter than the stream is replayed in periods: after its
    last arrival comes one mean gap of the trace ((last - first) / (m - 1)), then its gaps
    again. Request i lands at t[i mod m] + (i div m) * period, so the long-run rate is the
    trace's own rate and row i of the trace always lines up with requests i, i + m, ...
    """
    times = _trace_times(config)  # (m,) seconds from the first arrival
    m = len(times)
    if n > m and m < 2:
        raise WorkbenchError(
            f"the trace has {m} arrival; cannot repeat its gap pattern for {n} requests",
            source=str(config.path),
            field=config.column,
        )
    if n <= m:
        return Arrivals(times[:n] * config.time_scale)
    period = times[-1] * m / (m - 1)  # span + one mean gap
    cycle, row = np.divmod(np.arange(n), m)  # (n,), (n,)
    return Arrivals((times[row] + cycle * period) * config.time_scale)


def _trace_times(config: TraceArrivals) -> np.ndarray:
    """The trace's arrival times in seconds, relative to its first arrival. # (m,)"""
    raw = read_column(config.path, config.column)  # (m,) in config.time_unit
    decreasing = np.diff(raw) < 0  # (m-1,)
    if decreasing.any():
        i = int(np.argmax(decreasing)) + 1
        where = read_table(config.path).where(i)
        raise WorkbenchError(
            f"arrival times must be non-decreasing; {where} goes back in time "
            f"({raw[i - 1]:g} then {raw[i]:g})",
            source=str(config.path),
            field=config.column,
        )
    seconds = raw / 1000.0 if config.time_unit == "ms" else raw
    return seconds - seconds[0]


def closed_loop_arrivals(config: ClosedLoopArrivals, n: int, rng: np.random.Generator) -> Arrivals:
    """No times in advance: each client sends its next request when its last one ends."""
    return Arrivals(
        np.full(n, np.nan),
        closed_loop_concurrency=config.concurrency,
        think_time_s=config.think_time_s,
    )


def batch_arrivals(config: BatchArrivals, n: int, rng: np.random.Generator) -> Arrivals:
    """Offline batch inference: the whole pool of requests is there at once."""
    return Arrivals(np.zeros(n))


ARRIVAL_SAMPLERS: dict[str, ArrivalSampler] = {
    "poisson": poisson_arrivals,
    "gamma": gamma_arrivals,
    "constant": constant_arrivals,
    "trace": trace_arrivals,
    "closed_loop": closed_loop_arrivals,
    "batch": batch_arrivals,
}
