"""A small Levenberg-Marquardt solver for the kernel fit (a handful of parameters, tens of
thousands of residuals; numpy only, deterministic from its starting point)."""

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
