"""How far predicted response lengths are from the true ones."""

from __future__ import annotations

import numpy as np

WITHIN = (50, 100)  # tokens: the paper's bucket width, and twice it


def length_errors(predicted: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Mean absolute error in tokens, the share within 50 and 100 tokens, and the share
    underestimated (each one an FCR failure at a cap of its prediction)."""
    error = np.asarray(predicted, dtype=np.float64) - np.asarray(true, dtype=np.float64)  # (n,)
    out = {"mae": float(np.abs(error).mean())}
    out |= {f"within_{k}": float((np.abs(error) <= k).mean()) for k in WITHIN}
    out["underestimated"] = float((error < 0).mean())
    return out
