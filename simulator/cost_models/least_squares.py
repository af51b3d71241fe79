"""Small least-squares solvers, numpy only: Levenberg-Marquardt for the kernel fit (a handful of
parameters, tens of thousands of residuals; deterministic from its starting point), and
non-negative linear least squares for the calibrated step-cost fit and a lookahead run's
candidate n-grams by output position."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Residuals = Callable[[np.ndarray], np.ndarray]


def levenberg_marquardt(
    residuals: Residuals, start: np.ndarray, max_iterations: int = 200, tolerance: float = 1e-10
) -> np.ndarray:
    """Parameters minimising Σ residuals(x)², from `start` (forward-difference Jacobian)."""
    x = np.array(start, dtype=np.float64)
    r = residuals(x)
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(max_iterations):
        jacobian = _jacobian(residuals, x, r)  # (residuals, params)
        normal = jacobian.T @ jacobian
        gradient = jacobian.T @ r
        improved = False
        while damping < 1e10:
            scaled = normal + damping * np.diag(np.diag(normal) + 1e-12)
            step = np.linalg.solve(scaled, -gradient)
            trial = x + step
            with np.errstate(all="ignore"):  # a trial far out may overflow: it is rejected
                r_trial = residuals(trial)
            cost_trial = float(r_trial @ r_trial)
            if np.isfinite(cost_trial) and cost_trial < cost:
                improved = cost - cost_trial > tolerance * cost
                x, r, cost = trial, r_trial, cost_trial
                damping = max(damping / 3.0, 1e-12)
                break
            damping *= 4.0
        if not improved:
            break
    return x


def _jacobian(residuals: Residuals, x: np.ndarray, r: np.ndarray) -> np.ndarray:
    columns = []
    for j in range(len(x)):
        h = 1e-6 * max(abs(x[j]), 1.0)
        shifted = x.copy()
        shifted[j] += h
        columns.append((residuals(shifted) - r) / h)
    return np.stack(columns, axis=1)


def non_negative_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||a x − b|| over x ≥ 0, solved on columns scaled to unit norm. Relative to the
    step, a price per key and one per step differ by 10^4 and their columns the other way
    round; unscaled, the solver's tolerance (set by the largest entry) took a key's price for
    0 whenever a parameter left the active set, and the fit collapsed."""
    norms = np.linalg.norm(a, axis=0)  # (params,)
    norms[norms == 0.0] = 1.0
    return _lawson_hanson(a / norms, b) / norms


def _lawson_hanson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||a x − b|| over x ≥ 0 (Lawson and Hanson's active-set method)."""
    columns = a.shape[1]
    x = np.zeros(columns)
    passive = np.zeros(columns, dtype=bool)
    tolerance = 1e-12 * max(1.0, float(np.abs(a).max(initial=0.0)))
    # Singular values cut as lstsq cuts them on the whole design (eps × its larger side): on
    # the factor the default would keep near-alike columns and their huge opposite parts.
    rcond = np.finfo(np.float64).eps * max(a.shape)
    if a.shape[0] > columns:  # ||a x − b|| = ||r x − qᵀ b|| + const: solve on r, (params, params)
        q, a = np.linalg.qr(a)
        b = q.T @ b
    for _ in range(3 * columns + 10):
        gradient = a.T @ (b - a @ x)  # (params,)
        candidates = ~passive & (gradient > tolerance)
        if not candidates.any():
            break
        best = np.where(candidates, gradient, -np.inf)  # (params,)
        # Ties (columns alike on every point: no point tells their rises apart) go to the
        # first, so that rounding in the factorisation does not choose.
        passive[np.argmax(best >= best.max() * (1.0 - 1e-9))] = True
        while True:
            z = np.zeros(columns)
            z[passive], *_ = np.linalg.lstsq(a[:, passive], b, rcond=rcond)
            if (z[passive] > 0).all():
                x = z
                break
            blocked = passive & (z <= 0)
            step = np.min(x[blocked] / np.maximum(x[blocked] - z[blocked], 1e-300))
            x = x + step * (z - x)
            passive &= x > tolerance
            x[~passive] = 0.0
    return x
