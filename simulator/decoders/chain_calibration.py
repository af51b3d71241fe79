"""What a stored speculative run with a chain draft measured of its draft, fixed or adaptive k.

Each decode emission is replayed in order: the drafted length (k, or with an adaptive length
the rule's, `AdaptiveDraftLength`, fed with the sequence's earlier accepted counts and reset
where the records show a prefill, as the real decoder forgets a preempted sequence), capped
at the room, and the accepted tokens. Accepting a of d drafted tokens reached positions
1..min(a + 1, d) and accepted 1..a, so a position's rate is accepted / reached, and a full
draft accepts at least i tokens with probability Π rates[:i]. (A fixed k is the rule at its
longest: `min_tokens` = k.)

Acceptance differs mostly between requests: in two runs of the zoo's `small` pair, 41.5 % and
52 % of the requests accepted over 5 tokens a step on average and 22.5 % and 20 % under 2
(means under the adaptive rule, which widens the spread), and past an answer's first eight
tokens a step accepted 3.2-3.7 whatever the position. An adaptive rule drafts long for the
first kind and short for the second, so one pooled set of rates, drawn independently per
step, gives the simulated rule the wrong mix (11-13 % fewer accepted tokens per step than
measured on that pair); with a fixed k the run's histogram, drawn alike for every step, gives
the right mean but too narrow a spread of per-request latency (the TPOT p90 of a twin of a
`small` run at k = 4: 41 % short).
The measurement is a mixture of request types instead, each with its own rates, fitted by
expectation-maximisation over the run's sequences (one type per sequence, from its prefill
on), with as many types (1-8) as the Bayesian information criterion prefers. A sequence's
first decode step, right after its prompt, has rates of its own, pooled over the types (on
that pair it accepted nothing in 34 % of requests and all six in 33-36 %; an answer's first
eight tokens came at 2.0-2.1 accepted a step): it drafts k, and what it accepts sets where an
adaptive rule starts. The simulator draws a sequence's type apart from its first step's
outcome, which in the runs are most likely related.
A request's last emission is read as capped by its room (no rejection counted), as it is
when the output limit ends it, and nearly so when EOS does.

Requests differ within a type too: each measured sequence keeps rates of its own, its counts
shrunk towards its types' rates (weighted by its posterior) by m pseudo-steps per position,
and each simulated sequence takes one measured sequence's rates, drawn uniformly. m is the
value of `SHRINKAGE_GRID` under which half of every sequence's steps (alternate steps)
predict the other half best: no shrinkage overfits a sequence's few steps, full shrinkage is
the types alone, whose twins drew too few slow requests (on a `small` pair's run of 200
requests m = 16 beside 7 types; its held-out twins' 1st percentile of tokens per step 1.87-1.97
with the types alone, 1.69-1.80 so, 1.57 measured).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError
from workbench.metrics.decode_emissions import DecodeEmissions
from workbench.scenario.decoders import AdaptiveKConfig
from workbench.scheduling.adaptive_draft import AdaptiveDraftLength

# The most types BIC may choose. A cap of 3 bound on the zoo's `small` pair, whose run BIC
# gives 7 of 8 (2026-11-28: a slow tail of requests the three types merged; the twins' TPOT
# p99 14 % short on average over eight held-out runs, 5 % with 8); each fit takes milliseconds.
MAX_TYPES = 8
# Pseudo-steps a sequence's own counts are shrunk by (towards its types' rates); the split-half
# fit chooses among them, and the last is the types alone to a fraction of a percent.
SHRINKAGE_GRID = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 1e6)
EM_ITERATIONS = 500
EM_TOLERANCE = 1e-9  # relative change of the log-likelihood that ends the fit
RATE_FLOOR = 1e-6  # keeps log(rate) and log(1 − rate) finite
WEIGHT_FLOOR = 1e-300  # keeps log(weight) finite


class UnreachedPosition(WorkbenchError):
    """No step of the run reached a drafted position: its acceptance there is unknown."""


def fixed_length(k: int) -> AdaptiveKConfig:
    """A fixed draft of k as the adaptive rule at its longest (it never drafts fewer)."""
    return AdaptiveKConfig(min_tokens=k)


@dataclass(frozen=True)
class ReplayedDraft:
    first: bool  # the sequence's first decode step (since its prefill)
    drafted: int  # the rule's length, capped at the room
    accepted: int


@dataclass(frozen=True)
class ChainMeasurement:
    rates: np.ndarray  # (k,) acceptance rate of drafted positions 1..k, every step pooled
    first_rates: np.ndarray  # (k,) those of a sequence's first decode step
    type_weights: np.ndarray  # (S,) share of sequences of each type
    type_rates: np.ndarray  # (S, k) each type's rates of positions 1..k
    sequence_rates: np.ndarray  # (M, k) each measured sequence's own, shrunk to its types'
    shrinkage: float  # m: the pseudo-steps of that shrinkage


@dataclass(frozen=True)
class _Steps:
    """A run's decode steps as arrays, with the sequence each belongs to."""

    reached: np.ndarray  # (n, k) 0/1: the step reached drafted position i + 1
    accepted: np.ndarray  # (n, k) 0/1: ... and accepted it
    rejected: np.ndarray  # (n, k) 0/1: the position where the step stopped, if any
    starts: np.ndarray  # (m,) int64: each sequence's first step


def measure_chain(
    emissions: DecodeEmissions, k: int, rule: AdaptiveKConfig, field: str
) -> ChainMeasurement:
    """The run's rates: k its longest draft, `rule` its draft length's (`fixed_length(k)`
    for a fixed k)."""
    steps = _steps(list(replayed_drafts(emissions, k, rule, field)), k)
    reached = steps.reached.sum(axis=0)  # (k,)
    if not reached.all():
        raise UnreachedPosition(
            f"no step of the run reached drafted position {np.argmin(reached) + 1} of {k}: "
            "its acceptance there is unknown (outputs too short?)",
            field=field,
        )
    pooled = steps.accepted.sum(axis=0) / reached
    first = _rates(steps.reached[steps.starts], steps.accepted[steps.starts], pooled)
    later = _later_steps(steps)
    if not len(later.reached):  # every sequence ended after one decode step
        return ChainMeasurement(pooled, first, np.ones(1), pooled[None, :], pooled[None, :], 0.0)
    most = min(MAX_TYPES, len(later.starts))  # no more types than sequences
    fits = [_fit_types(later, pooled, n) for n in range(1, most + 1)]
    weights, rates, _ = min(fits, key=lambda fit: _bic(fit[2], len(fit[0]), k, len(later.reached)))
    prior = _prior_rates(later, weights, rates)
    shrinkage = _best_shrinkage(later, prior)
    every_step = np.ones(len(later.reached), dtype=bool)
    own = _shrunk(_sequence_counts(later, every_step), prior, shrinkage)
    return ChainMeasurement(pooled, first, weights, rates, own, shrinkage)


def replayed_drafts(
    emissions: DecodeEmissions, k: int, rule: AdaptiveKConfig, field: str
) -> Iterator[ReplayedDraft]:
    """Every decode emission's draft, in request then step order."""
    lengths = AdaptiveDraftLength(k, rule)
    spans = zip(
        emissions.request_row.tolist(),
        emissions.tokens.tolist(),
        emissions.count.tolist(),
        emissions.emitted_before.tolist(),
        emissions.output_tokens.tolist(),
        emissions.after_prefill.tolist(),
        strict=True,
    )
    for row, tokens, count, before, output, after_prefill in spans:
        if after_prefill:
            lengths.release(row)  # a new request, or one preempted: no history
        for j in range(count):
            first = not lengths.has_history(row)
            drafted = min(lengths.length(row), output - 1 - (before + j * tokens))  # room caps it
            taken = tokens - 1
            if taken > drafted:
                raise WorkbenchError(
                    f"request row {row} accepted {taken} tokens where the run's draft length "
                    f"rule drafts {drafted}: its records do not follow its decoder configuration",
                    field=field,
                )
            lengths.remember(row, taken)
            yield ReplayedDraft(first, drafted, taken)


def _steps(replayed: list[ReplayedDraft], k: int) -> _Steps:
    drafted = np.array([r.drafted for r in replayed], dtype=np.int64)[:, None]  # (n, 1)
    taken = np.array([r.accepted for r in replayed], dtype=np.int64)[:, None]
    position = np.arange(1, k + 1)[None, :]  # (1, k)
    return _Steps(
        reached=(position <= np.minimum(taken + 1, drafted)).astype(np.float64),
        accepted=(position <= taken).astype(np.float64),
        rejected=((position == taken + 1) & (taken < drafted)).astype(np.float64),
        starts=np.flatnonzero([r.first for r in replayed]),
    )


def _rates(reached: np.ndarray, accepted: np.ndarray, pooled: np.ndarray) -> np.ndarray:
    """(k,) accepted / reached per position of steps (n, k); pooled where none reached it."""
    count = reached.sum(axis=0)
    return np.where(count > 0, accepted.sum(axis=0) / np.maximum(count, 1), pooled)


def _later_steps(steps: _Steps) -> _Steps:
    """Every sequence's steps after its first, and where each sequence begins."""
    sequence = np.cumsum(np.isin(np.arange(len(steps.reached)), steps.starts)) - 1  # (n,)
    later = np.ones(len(sequence), dtype=bool)
    later[steps.starts] = False
    sequence = sequence[later]
    return _Steps(
        reached=steps.reached[later],
        accepted=steps.accepted[later],
        rejected=steps.rejected[later],
        starts=np.flatnonzero(np.r_[True, sequence[1:] != sequence[:-1]])[: len(sequence)],
    )


def _fit_types(
    steps: _Steps, pooled: np.ndarray, types: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """(weights (S,), rates (S, k), log-likelihood) of a mixture of `types` request types."""
    weights, rates = _initial_types(steps, pooled, types)
    previous = -np.inf
    for _ in range(EM_ITERATIONS):
        per_sequence = _sequence_log_likelihoods(steps, rates) + log_weights(weights)
        posterior, log_likelihood = type_posterior(per_sequence)
        weights, rates = _maximise(steps, posterior, pooled)
        if log_likelihood - previous <= EM_TOLERANCE * abs(log_likelihood):
            break
        previous = log_likelihood
    return weights, rates, log_likelihood


def _initial_types(steps: _Steps, pooled: np.ndarray, types: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences split into `types` equal groups by their share of reached positions
    accepted: deterministic, and apart from the start where the types differ."""
    per_sequence = np.add.reduceat(steps.accepted.sum(axis=1), steps.starts) / np.maximum(
        np.add.reduceat(steps.reached.sum(axis=1), steps.starts), 1
    )  # (m,)
    return _maximise(steps, equal_groups(per_sequence, types), pooled)


def equal_groups(score: np.ndarray, types: int) -> np.ndarray:
    """(S, m) 0/1: m sequences split into `types` equal groups by `score`, lowest first (a
    deterministic start for the fit, apart from the start where the types differ)."""
    group = np.zeros(len(score), dtype=np.int64)
    group[np.argsort(score, kind="stable")] = np.arange(len(score)) * types // len(score)
    return (group[None, :] == np.arange(types)[:, None]).astype(np.float64)


def log_weights(weights: np.ndarray) -> np.ndarray:
    """(S, 1) log of the types' weights, finite when a type empties out."""
    return np.log(np.maximum(weights, WEIGHT_FLOOR))[:, None]


def type_posterior(per_sequence: np.ndarray) -> tuple[np.ndarray, float]:
    """(posterior (S, m), log-likelihood) from each sequence's joint log-likelihood with each
    type (S, m), summed over types by log-sum-exp."""
    top = per_sequence.max(axis=0)  # (m,)
    likelihood = top + np.log(np.exp(per_sequence - top).sum(axis=0))  # (m,)
    return np.exp(per_sequence - likelihood), float(likelihood.sum())


def _maximise(
    steps: _Steps, posterior: np.ndarray, pooled: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weights and rates given each sequence's type posterior (S, m); a type that never
    reached a position takes the pooled rate there."""
    lengths = np.diff(np.append(steps.starts, len(steps.reached)))  # (m,) steps per sequence
    per_step = np.repeat(posterior, lengths, axis=1)  # (S, n)
    reached = per_step @ steps.reached  # (S, k)
    accepted = per_step @ steps.accepted
    rates = np.where(reached > 0, accepted / np.maximum(reached, 1e-300), pooled[None, :])
    weights = posterior.sum(axis=1) / posterior.sum()
    return weights, rates


def _sequence_log_likelihoods(steps: _Steps, rates: np.ndarray) -> np.ndarray:
    """(S, m) log-likelihood of each sequence's steps under each type's rates."""
    clipped = np.clip(rates, RATE_FLOOR, 1 - RATE_FLOOR)
    log_step = steps.accepted @ np.log(clipped).T + steps.rejected @ np.log1p(-clipped).T  # (n, S)
    return np.add.reduceat(log_step, steps.starts, axis=0).T


def _prior_rates(steps: _Steps, weights: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """(m, k) each sequence's types' rates, weighted by its posterior over the types."""
    per_sequence = _sequence_log_likelihoods(steps, rates) + log_weights(weights)
    posterior, _ = type_posterior(per_sequence)  # (S, m)
    return posterior.T @ rates


def _step_sequences(steps: _Steps) -> np.ndarray:
    """(n,) the sequence each step belongs to."""
    return np.searchsorted(steps.starts, np.arange(len(steps.reached)), side="right") - 1


def _sequence_counts(steps: _Steps, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(reached, accepted), each (m, k): the kept steps' counts per sequence."""
    sequence = _step_sequences(steps)[kept]
    reached = np.zeros((len(steps.starts), steps.reached.shape[1]))
    accepted = np.zeros_like(reached)
    np.add.at(reached, sequence, steps.reached[kept])
    np.add.at(accepted, sequence, steps.accepted[kept])
    return reached, accepted


def _shrunk(
    counts: tuple[np.ndarray, np.ndarray], prior: np.ndarray, shrinkage: float
) -> np.ndarray:
    """(m, k) each sequence's rates: its counts plus `shrinkage` pseudo-steps at its prior."""
    reached, accepted = counts
    return (accepted + shrinkage * prior) / (reached + shrinkage)


def _best_shrinkage(steps: _Steps, prior: np.ndarray) -> float:
    """The grid's m under which alternate steps of each sequence predict the others best."""
    sequence = _step_sequences(steps)
    place = np.arange(len(steps.reached)) - steps.starts[sequence]  # (n,) within its sequence
    halves = [place % 2 == 0, place % 2 == 1]
    counts = [_sequence_counts(steps, kept) for kept in halves]

    def held_out(m: float) -> float:
        total = 0.0
        for fitted, predicted in ((counts[0], halves[1]), (counts[1], halves[0])):
            rates = np.clip(_shrunk(fitted, prior, m), RATE_FLOOR, 1 - RATE_FLOOR)[sequence]
            log_step = steps.accepted * np.log(rates) + steps.rejected * np.log1p(-rates)  # (n, k)
            total += float(log_step[predicted].sum())
        return total

    return best_shrinkage(held_out)


def best_shrinkage(held_out: Callable[[float], float]) -> float:
    """The m of `SHRINKAGE_GRID` with the highest held-out log-likelihood; a tie goes to the
    larger m, the simpler model (requests whose halves are alike to the last digit)."""
    return max(reversed(SHRINKAGE_GRID), key=held_out)


def _bic(log_likelihood: float, types: int, k: int, observations: int) -> float:
    """observations: the steps (the sequences, which carry the types, would penalise less;
    steps keep spurious types out of i.i.d. runs)."""
    parameters = types * k + types - 1
    return -2 * log_likelihood + parameters * np.log(observations)
