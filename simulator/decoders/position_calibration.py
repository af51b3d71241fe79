"""What a stored lookahead run measured of its acceptance: by output position, and by request.

A lookahead step emits more late in an output than early: the n-gram pool fills from the
output as it grows (and from the prompt). So a run's decode emissions (those with room for
every token a step may add) are counted by the tokens emitted before them, in ranges
starting at `POSITION_STARTS`; a range with fewer than `MIN_POSITION_EMISSIONS`, or reached by
fewer than half the requests that the run measured, joins the one before it (a thin first range,
the next). A range few requests reach holds only the longest outputs' emissions there, and the
twin carries the last range to every later position: on `small` (W5 N4 G5), the 43 of 200
requests whose outputs passed 128 tokens emitted 3.87 tokens a step there against 3.69 over
64-128, where 91 held-out requests emitted 3.50 over 128-256 (docs/fidelity.md, "The late
positions"). On the zoo's `small` target over Spec-Bench
questions (W5 N4 G5): 1.00 tokens per step over a request's first 4 tokens, 1.56 from 4, 2.35
from 8, 3.12 from 16, 3.6-3.9 from 32 on.

Requests differ too: some texts repeat and fill their pool sooner (past its first 16 tokens,
56 % of that run's requests emitted the most a step can, 4 tokens, every step; a tenth under
2.7 a step). One set of rows drawn alike for every request gives every simulated request the same
expected speed, and a twin's per-request latency spread too narrow (TPOT p90 and p99 8-28 %
short). The rows are a mixture of request types instead, each with its own rows, fitted by
expectation-maximisation over the run's requests (one type per request, for all its
emissions), with as many types (1-8) as the Bayesian information criterion prefers; a type's
rows are smoothed towards the pooled rows by `SMOOTHING` emissions each, so that a range a
type never reached is the pooled one there.

Requests differ within a type too, as a speculative run's do (`chain_calibration`): each
measured request keeps rows of its own, its counts shrunk towards its types' rows (weighted by
its posterior) by m pseudo-emissions per range, and each simulated request takes one measured
request's rows, drawn uniformly. m is the value of `SHRINKAGE_GRID` under which every other
emission of each request (by its step's parity) predicts the others best. On `small`'s
acceptance run (200 requests, 3 types) m = 16 predicts them 68 nats better than the types
alone; the twins' mean |error| over eight held-out runs moved by under 2 points on every
latency median, p90 and p99 but TTFT's p99 (docs/fidelity.md, "Lookahead twins: each
measured request's own rows").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from simulator.decoders.chain_calibration import (
    EM_ITERATIONS,
    EM_TOLERANCE,
    MAX_TYPES,
    best_shrinkage,
    equal_groups,
    log_weights,
    type_posterior,
)
from workbench.metrics.decode_emissions import DecodeEmissions

# Where the histograms by output position start (tokens emitted before the step).
POSITION_STARTS = (0, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
MIN_POSITION_EMISSIONS = 100  # a mean of 1-4 tokens per step to about ±0.1
MIN_POSITION_REACH = 0.5  # share of the measured requests a range must hold emissions of
SMOOTHING = 1.0  # pooled emissions added to each type's range: no probability is 0
# 1-8 types (BIC chose 3 on `small`), fitted as a speculative chain's are (`chain_calibration`).
FLOOR = 1e-300  # keeps divisions and logs of empty rows and types finite


@dataclass(frozen=True)
class PositionMeasurement:
    starts: np.ndarray  # (R,) int64: where each range of tokens emitted before starts
    counts: np.ndarray  # (R, K + 1) emissions by tokens beyond the first, every request
    type_weights: np.ndarray  # (S,) share of requests of each type
    type_counts: np.ndarray  # (S, R, K + 1) each type's expected emissions, smoothed
    sequence_rows: np.ndarray  # (M, R, K + 1) each measured request's own rows, shrunk
    shrinkage: float  # m: the pseudo-emissions of that shrinkage


def measure_positions(emissions: DecodeEmissions, headroom: int, size: int) -> PositionMeasurement:
    """The run's emissions with room ≥ `headroom` by position and request type; `size` = K + 1
    bins (index = tokens beyond the first)."""
    per_request = _per_request(emissions, headroom, size)  # (m, ranges, size)
    kept = _kept_ranges(per_request.sum(axis=2))
    measured = per_request.sum(axis=(1, 2)) > 0  # (m,) requests with an emission counted
    if not measured.any():
        raise ValueError("no decode emission with room for every token a step may add")
    merged = np.add.reduceat(per_request, kept, axis=1)[measured]  # (M, R, size)
    starts = np.array(POSITION_STARTS, dtype=np.int64)[kept]
    most = min(MAX_TYPES, len(merged))
    fits = [_fit_types(merged, n) for n in range(1, most + 1)]
    observations = float(merged.sum())
    weights, counts, _ = min(fits, key=lambda fit: _bic(fit, observations))
    prior = _prior_rows(merged, weights, counts)
    halves = [
        np.add.reduceat(_per_request(emissions, headroom, size, parity), kept, axis=1)[measured]
        for parity in (0, 1)
    ]
    shrinkage = _best_shrinkage(halves, prior)
    pooled = merged.sum(axis=0).round().astype(np.int64)  # (R, K + 1) whole emissions
    own = _shrunk(merged, prior, shrinkage)
    return PositionMeasurement(starts, pooled, weights, counts, own, shrinkage)


def _per_request(
    emissions: DecodeEmissions, headroom: int, size: int, parity: int | None = None
) -> np.ndarray:
    """(m, len(POSITION_STARTS), size): each request's emissions by range and tokens (with
    `parity`, those made on a step of that parity)."""
    _, request = np.unique(emissions.request_row, return_inverse=True)  # (e,) 0..m−1
    counts = np.zeros((int(request.max(initial=-1)) + 1, len(POSITION_STARTS), size))
    bounds = [*POSITION_STARTS, np.iinfo(np.int64).max]
    beyond = np.minimum(emissions.tokens - 1, size - 1)  # (e,) tokens beyond the first
    for index, (low, high) in enumerate(itertools.pairwise(bounds)):
        if parity is None:
            made = emissions.at_positions(headroom, low, high)  # (e,)
        else:
            made = emissions.at_positions_on_steps(headroom, low, high, parity)
        np.add.at(counts, (request, index, beyond), made)
    return counts


def _kept_ranges(emitted: np.ndarray) -> np.ndarray:
    """Indices of the ranges that start a merged range, from each request's emissions by
    range (m, ranges): from the end, a thin range (few emissions, or few of the measured
    requests) joins the one before it; then a thin first range, the next."""
    measured = emitted.sum(axis=1) > 0  # (m,) requests with an emission counted
    reach = MIN_POSITION_REACH * measured.sum()
    kept, columns = list(range(emitted.shape[1])), list(emitted.T)  # each (m,)

    def thin(column: np.ndarray) -> bool:
        return bool(column.sum() < MIN_POSITION_EMISSIONS or (column > 0).sum() < reach)

    for i in range(len(kept) - 1, 0, -1):
        if thin(columns[i]):
            columns[i - 1] = columns[i - 1] + columns.pop(i)
            kept.pop(i)
    if len(kept) > 1 and thin(columns[0]):
        kept.pop(1)
    return np.array(kept, dtype=np.int64)


def _fit_types(counts: np.ndarray, types: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(weights (S,), smoothed counts (S, R, K + 1), log-likelihood) of `types` request types
    over each request's counts (m, R, K + 1), started from equal groups by mean tokens. The
    smoothing is a fixed prior, so the plain log-likelihood may dip at convergence: a dip ends
    the fit as a rise under the tolerance does."""
    beyond = np.arange(counts.shape[2])  # (K + 1,) tokens beyond the first
    mean = (counts.sum(axis=1) @ beyond) / counts.sum(axis=(1, 2))  # (m,) each request's
    weights, typed = _maximise(counts, equal_groups(mean, types))
    previous = log_likelihood = -np.inf
    for _ in range(EM_ITERATIONS):
        per_request = _request_log_likelihoods(counts, typed) + log_weights(weights)  # (S, m)
        posterior, log_likelihood = type_posterior(per_request)
        weights, typed = _maximise(counts, posterior)
        if log_likelihood - previous <= EM_TOLERANCE * abs(log_likelihood):
            break
        previous = log_likelihood
    return weights, typed, log_likelihood


def _maximise(counts: np.ndarray, posterior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weights (S,) and each type's smoothed counts (S, R, K + 1) given the posterior (S, m)."""
    pooled = counts.sum(axis=0)  # (R, K + 1)
    shares = pooled / np.maximum(pooled.sum(axis=1, keepdims=True), FLOOR)  # (R, K + 1)
    typed = np.einsum("sm,mrk->srk", posterior, counts) + SMOOTHING * shares[None]
    return posterior.sum(axis=1) / posterior.sum(), typed


def _request_log_likelihoods(counts: np.ndarray, typed: np.ndarray) -> np.ndarray:
    """(S, m) log-likelihood of each request's emissions under each type's rows."""
    rows = typed / typed.sum(axis=2, keepdims=True)  # (S, R, K + 1)
    logs = np.log(np.maximum(rows, FLOOR)).reshape(len(rows), -1)  # (S, R · (K + 1))
    return logs @ counts.reshape(len(counts), -1).T


def _prior_rows(counts: np.ndarray, weights: np.ndarray, typed: np.ndarray) -> np.ndarray:
    """(M, R, K + 1) each request's types' rows, weighted by its posterior over the types."""
    per_request = _request_log_likelihoods(counts, typed) + log_weights(weights)  # (S, M)
    posterior, _ = type_posterior(per_request)
    rows = typed / typed.sum(axis=2, keepdims=True)  # (S, R, K + 1)
    return np.einsum("sm,srk->mrk", posterior, rows)


def _shrunk(counts: np.ndarray, prior: np.ndarray, shrinkage: float) -> np.ndarray:
    """(M, R, K + 1) each request's rows: its counts plus `shrinkage` pseudo-emissions at its
    prior in every range."""
    return (counts + shrinkage * prior) / (counts.sum(axis=2, keepdims=True) + shrinkage)


def _best_shrinkage(halves: list[np.ndarray], prior: np.ndarray) -> float:
    """The grid's m under which each half of every request's emissions (M, R, K + 1) predicts
    the other best."""

    def held_out(m: float) -> float:
        total = 0.0
        for fitted, predicted in ((halves[0], halves[1]), (halves[1], halves[0])):
            rows = np.maximum(_shrunk(fitted, prior, m), FLOOR)
            total += float((predicted * np.log(rows)).sum())
        return total

    return best_shrinkage(held_out)


def _bic(fit: tuple[np.ndarray, np.ndarray, float], observations: float) -> float:
    """observations: the emissions (as a chain's fit counts steps: spurious types stay out).
    Every bin of every range counts as a parameter, those no emission can reach too: a
    slightly stronger penalty."""
    _, typed, log_likelihood = fit
    types, ranges, bins = typed.shape
    parameters = types * ranges * (bins - 1) + types - 1
    return -2 * log_likelihood + parameters * np.log(max(observations, 2.0))
