"""The candidate tokens a lookahead twin feeds: a real run's n-grams by output position.

The real decoder verifies, beside its window, the n-grams its pool holds for a sequence's
current token (at most G), each cut to the sequence's room (`rest[:max_new − 1]`: a token past
its output could never be emitted). The pool fills from the output as it grows, so a sequence
is fed more n-grams late in its output than early (`candidate_calibration` measures how many).
Here each sequence draws its range's mean's floor or, with the mean's fractional part as the
chance, its ceiling, so that the steps' n-grams add up to the run's, and feeds N − 1 tokens of
each, fewer within N − 1 tokens of its end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CandidatesByPosition:
    starts: np.ndarray  # (R,) int64: where each range of tokens emitted before starts, from 0
    ngrams: np.ndarray  # (R,) float64: mean candidate n-grams per sequence and step
    tail: int  # tokens of an n-gram beyond the current one: N − 1

    def tokens(self, rng: np.random.Generator, caps: np.ndarray, emitted: np.ndarray) -> np.ndarray:
        """(b,) candidate tokens each sequence is fed: caps (b,) its room beyond the step's
        first token, emitted (b,) the tokens it has emitted."""
        mean = self.ngrams[np.searchsorted(self.starts, emitted, side="right") - 1]  # (b,)
        floor = np.floor(mean)
        ngrams = floor + (rng.random(len(mean)) < mean - floor)  # (b,)
        return ngrams.astype(np.int64) * np.clip(caps, 0, self.tail)
