"""How many measured points any cost model that never prices more tokens faster could put
within a tolerance: the most points of one curve (one op or layer of one model, GPU and TP
degree, by tokens per step) that a single non-decreasing function passes within ±tolerance
of. A bound on every shape-monotone model (the roofline, the fitted kernel model, any
padding or wave rule): where it is near 100 %, the measurements' own non-monotone kernel
switches are not what keeps a model from a point-by-point target; where it is lower, they
are, and no such model can do better.
"""

from __future__ import annotations

import numpy as np


def most_within_monotone(tokens: np.ndarray, measured: np.ndarray, tolerance: float) -> int:
    """The largest number of the points (`tokens`, `measured`; one point per token count)
    that one non-decreasing function of tokens passes within ±`tolerance` (relative) of:
    each point allows the band [m·(1 − tol), m·(1 + tol)], and a chosen subset fits when its
    bands, in token order, admit a non-decreasing pick. Like a longest increasing
    subsequence: `lowest[c]` is the lowest value a fitting subset of `c` points can end on
    (lower leaves more room), updated point by point for every `c` at once."""
    if len(tokens) != len(measured) or len(np.unique(tokens)) != len(tokens):
        raise ValueError("expected one measured point per token count")
    order = np.argsort(tokens)
    lows = measured[order] * (1.0 - tolerance)
    highs = measured[order] * (1.0 + tolerance)
    lowest = np.full(len(tokens) + 1, np.inf)  # (n + 1,)
    lowest[0] = -np.inf
    for low, high in zip(lows.tolist(), highs.tolist(), strict=True):
        fits = lowest[:-1] <= high  # subsets of c points this band can extend
        extended = np.where(fits, np.maximum(lowest[:-1], low), np.inf)
        lowest[1:] = np.minimum(lowest[1:], extended)
    return int(np.isfinite(lowest[1:]).sum())  # subsets of every size up to the largest
