"""How many tokens beyond the first one decode step emits: a distribution over 0..K.

A speculative chain of k drafted tokens stops at the first rejection, so its accepted count
A is described by P(A ≥ i): α^i for an i.i.d. rate α (a geometric truncated at k, mean
Σ_{i=1..k} α^i), Π rates[:i] for per-position rates, or measured counts. Drafting fewer
tokens (a sequence near its end) accepts min(A, drafted): the first tokens of a chain are
judged the same way whatever follows them, so capping a draw is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from workbench.errors import WorkbenchError
from workbench.scenario.decoders import AcceptanceModel, HistogramAcceptance, IIDAcceptance


@dataclass(frozen=True)
class AcceptanceDistribution:
    """P(accepted = i) for i = 0..K, K the most tokens a step accepts beyond its first."""

    probabilities: np.ndarray  # (K + 1,), sums to 1

    @classmethod
    def from_survival(cls, survival: np.ndarray) -> AcceptanceDistribution:
        """From P(A ≥ i), i = 0..K (survival[0] = 1, non-increasing)."""
        tail = np.append(np.asarray(survival, dtype=np.float64), 0.0)  # (K + 2,)
        return cls(np.maximum(tail[:-1] - tail[1:], 0.0))

    @classmethod
    def iid(cls, rate: float, k: int) -> AcceptanceDistribution:
        return cls.from_survival(rate ** np.arange(k + 1, dtype=np.float64))

    @classmethod
    def positional(cls, rates: list[float], k: int, field: str) -> AcceptanceDistribution:
        """Rates of positions 1..k (more are ignored: they are never drafted)."""
        if len(rates) < k:
            raise WorkbenchError(
                f"{len(rates)} rates for {k} drafted positions; give one rate per position",
                field=field,
            )
        return cls.from_survival(np.cumprod([1.0, *rates[:k]]))

    @classmethod
    def histogram(cls, counts: list[float] | np.ndarray, k: int) -> AcceptanceDistribution:
        """Counts of 0, 1, 2… accepted tokens; counts beyond k fold into k (min(A, k))."""
        weights = np.zeros(k + 1)
        given = np.asarray(counts, dtype=np.float64)
        weights[: min(len(given), k + 1)] = given[: k + 1]
        weights[k] += given[k + 1 :].sum()
        return cls(weights / weights.sum())

    @classmethod
    def from_config(cls, acc: AcceptanceModel, k: int) -> AcceptanceDistribution:
        """A scenario's `acceptance` (iid, positional or histogram) for k drafted tokens."""
        if isinstance(acc, IIDAcceptance):
            return cls.iid(acc.rate, k)
        if isinstance(acc, HistogramAcceptance):
            return cls.histogram(acc.counts, k)
        return cls.positional(acc.rates, k, "decoder.acceptance.rates")

    @property
    def max_accepted(self) -> int:
        return len(self.probabilities) - 1

    @property
    def mean(self) -> float:
        return float(np.dot(np.arange(len(self.probabilities)), self.probabilities))

    def sample(self, rng: np.random.Generator, caps: np.ndarray) -> np.ndarray:
        """One draw per sequence, each capped at its `caps` entry (tokens it may still
        emit beyond the first). caps: (b,) int; returns (b,) int64."""
        cdf = np.cumsum(self.probabilities)  # (K + 1,)
        cdf[-1] = 1.0  # rounding must not leave room beyond K
        draws = np.searchsorted(cdf, rng.random(len(caps)), side="right")  # (b,)
        return np.minimum(draws, caps).astype(np.int64)


@dataclass(frozen=True)
class AcceptanceMixture:
    """Requests of a few types, each accepting as its own distribution: a sequence draws
    its type at its first decode step, which accepts as `first` does, and keeps it. Rows of
    `sample`: a type 0..S-1, or S for a first step."""

    weights: np.ndarray  # (S,) share of sequences of each type, sums to 1
    types: tuple[AcceptanceDistribution, ...]  # S distributions over 0..K
    first: AcceptanceDistribution  # a sequence's first decode step

    @property
    def first_row(self) -> int:
        return len(self.types)

    def draw_types(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n,) int64: types of n new sequences."""
        return _draw_types(self.weights, rng, n)

    @cached_property
    def _cdf(self) -> np.ndarray:
        """(S + 1, K + 1): each row's cumulative distribution, the first step's last."""
        return _row_cdfs((*self.types, self.first))

    def sample(self, rng: np.random.Generator, caps: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """One draw per sequence from its row's distribution, capped at `caps`: (b,) each."""
        return _draw_rows(self._cdf, rows, rng, caps)


@dataclass(frozen=True)
class AcceptanceByPosition:
    """Acceptance that changes along a sequence's output (a lookahead pool fills from the
    output as it grows), by type (some texts fill it sooner; a type may be one measured
    request): `rows[s][i]` for sequences of type s that have emitted `starts[i]` to
    `starts[i + 1]` − 1 tokens, the last row beyond. A sequence draws its type once
    (`draw_types`) and keeps it."""

    starts: np.ndarray  # (R,) int64, increasing, starts[0] = 0
    rows: tuple[tuple[AcceptanceDistribution, ...], ...]  # S types × R distributions over 0..K
    weights: np.ndarray  # (S,) share of sequences of each type, sums to 1

    def row(self, emitted: np.ndarray) -> np.ndarray:
        """(b,) each sequence's row from the tokens it has emitted."""
        return np.searchsorted(self.starts, emitted, side="right") - 1

    def draw_types(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n,) int64: types of n new sequences (no draw with one type)."""
        if len(self.weights) == 1:
            return np.zeros(n, dtype=np.int64)
        return _draw_types(self.weights, rng, n)

    @cached_property
    def _cdf(self) -> np.ndarray:
        """(S · R, K + 1): each type's rows' cumulative distributions, type by type."""
        return _row_cdfs(tuple(row for rows in self.rows for row in rows))

    def sample(
        self, rng: np.random.Generator, caps: np.ndarray, emitted: np.ndarray, types: np.ndarray
    ) -> np.ndarray:
        """One draw per sequence from its type's row at its position, capped at `caps`."""
        rows = types * len(self.starts) + self.row(emitted)  # (b,)
        return _draw_rows(self._cdf, rows, rng, caps)


def _draw_types(weights: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """(n,) int64: n draws of a type by its weight."""
    cdf = np.cumsum(weights)
    cdf[-1] = 1.0
    return np.searchsorted(cdf, rng.random(n), side="right").astype(np.int64)


def _row_cdfs(rows: tuple[AcceptanceDistribution, ...]) -> np.ndarray:
    """(R, K + 1): the rows' cumulative distributions."""
    cdf = np.cumsum([r.probabilities for r in rows], axis=1)
    cdf[:, -1] = 1.0  # rounding must not leave room beyond K
    return cdf


def _draw_rows(
    cdf: np.ndarray, rows: np.ndarray, rng: np.random.Generator, caps: np.ndarray
) -> np.ndarray:
    """(b,) int64: one draw per sequence from its row of `cdf`, capped at `caps`."""
    draws = (cdf[rows] <= rng.random(len(caps))[:, None]).sum(axis=1)  # (b,)
    return np.minimum(draws, caps).astype(np.int64)
