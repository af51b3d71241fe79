"""What a stored lookahead run measured of the candidates it fed: n-grams by output position.

The real decoder records a step's candidate tokens, summed over its decoding sequences, as
drafted, and each sequence's window in the verified tokens beside them; how many n-grams each
sequence was fed is not recorded. It is measured here: in each range of output positions (the
ranges the acceptance is measured in), the mean n-grams per sequence and step are the
non-negative least-squares solution of

    drafted tokens of a step = Σ over its decoding sequences of n(range) · min(N − 1, room),

over the steps whose every decoding sequence is known (its request finished; the window count
says how many decoded). On the zoo's `small` target over Spec-Bench questions (W5 N4 G5) that
is 0.3 n-grams a step over a sequence's first 4 tokens, 1.6 from 4, 2.7 from 8, 3.8 from 16,
4.4-4.7 from 32 on: a run of 32-160-token outputs fed 10.2 candidate tokens per sequence and
step, and its mean alone under-fed the 64-256-token outputs of later runs (11.6) by 12 %,
where its ranges predicted them within 1.1 %.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.cost_models.least_squares import non_negative_least_squares
from workbench.metrics.decode_emissions import DecodeEmissions
from workbench.records import StepRecords
from workbench.scenario.decoders import LookaheadDecoderConfig


@dataclass(frozen=True)
class CandidateMeasurement:
    starts: np.ndarray  # (R,) int64: where each range of tokens emitted before starts
    ngrams: np.ndarray  # (R,) float64: candidate n-grams per decoding sequence and step
    mean_tokens: float  # candidate tokens per decoding sequence and step, over the run
    steps: int  # steps fitted (every decoding sequence known)


def measure_candidates(
    emissions: DecodeEmissions,
    steps: StepRecords,
    starts: np.ndarray,
    decoder: LookaheadDecoderConfig,
) -> CandidateMeasurement | str:
    """The run's candidate n-grams in the ranges starting at `starts`; or why not."""
    window = decoder.window_tokens
    windows = steps.verified_tokens - steps.drafted_tokens  # (s,) W(N−1) per decoding sequence
    if (windows % window).any():
        return f"its steps do not record a window of {window} tokens per sequence"
    found = _sequence_steps(emissions, steps)
    if found is None:
        return "its decode emissions name steps it did not record"
    row, position, room = found  # (d,) each
    ranges = np.searchsorted(starts, position, side="right") - 1  # (d,)
    fed = np.zeros((len(windows), len(starts)))  # (s, R) tokens one n-gram a sequence feeds
    np.add.at(fed, (row, ranges), np.clip(room, 0, decoder.ngram - 1))
    known = (windows > 0) & (np.bincount(row, minlength=len(windows)) * window == windows)
    if not known.any():
        return "no decode step whose every sequence belongs to a finished request"
    ngrams = non_negative_least_squares(fed[known], steps.drafted_tokens[known].astype(float))
    ngrams = fill_unreached(ngrams, fed[known].sum(axis=0) > 0)
    mean = float(steps.drafted_tokens.sum()) * window / float(windows.sum())
    return CandidateMeasurement(starts, ngrams, mean, int(known.sum()))


def _sequence_steps(
    emissions: DecodeEmissions, steps: StepRecords
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(row in `steps`, tokens emitted before, room beyond the step's first token), (d,) each,
    of every decode emission (one per sequence and step; a real run's are few enough); None
    if an emission names a step the run did not record."""
    count = emissions.count
    span = np.repeat(np.arange(len(count)), count)  # (d,)
    j = np.arange(len(span)) - np.repeat(np.cumsum(count) - count, count)  # (d,) within span
    step = emissions.first_step[span] + j
    position = emissions.emitted_before[span] + j * emissions.tokens[span]
    room = emissions.output_tokens[span] - position - 1
    stride = int(steps.step.max(initial=0)) + 1
    keys = steps.replica.astype(np.int64) * stride + steps.step  # (s,)
    order = np.argsort(keys, kind="stable")
    wanted = emissions.replica[span] * stride + step  # (d,)
    found = np.minimum(np.searchsorted(keys, wanted, sorter=order), len(keys) - 1)
    row = order[found]
    if not (keys[row] == wanted).all():
        return None
    return row, position, room


def fill_unreached(ngrams: np.ndarray, reached: np.ndarray) -> np.ndarray:
    """A range no fitted step reached takes the nearest reached range before it (after it,
    for leading ones)."""
    if not reached.any():
        return ngrams
    index = np.where(reached, np.arange(len(ngrams)), -1)
    index = np.maximum.accumulate(index)
    index[index < 0] = int(np.argmax(reached))
    return ngrams[index]
