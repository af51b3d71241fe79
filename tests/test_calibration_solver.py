"""The calibration fit's non-negative least squares on the problems it is given: rows
relative to each step's time, where a step's price and a key's differ by 10^4."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost_models.least_squares import non_negative_least_squares

TRUTH = np.array([1e-3, 2e-3, 0.0, 5e-7, 3e-7, 0.0])  # s a step (curve rises); s a key


def relative_problem(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Curve hats, keys, and a column alike to the keys' that the truth does not use (the
    solver takes it in, then must drop it): each row divided by its step's time."""
    rng = np.random.default_rng(seed)
    hats = rng.uniform(0.5, 2.0, size=(60, 3))  # (n, 3)
    keys = rng.uniform(1e3, 2e4, size=(60, 2))  # (n, 2) keys read
    alike = keys[:, :1] * rng.uniform(0.9, 1.1, size=(60, 1))  # (n, 1)
    design = np.concatenate([hats, keys, alike], axis=1)  # (n, 6)
    seconds = design @ TRUTH  # (n,)
    return design / seconds[:, None], np.ones(len(seconds))


@pytest.mark.parametrize("seed", range(12))
def test_prices_per_step_and_per_key_are_recovered_exactly(seed: int) -> None:
    a, b = relative_problem(seed)
    solved = non_negative_least_squares(a, b)
    np.testing.assert_allclose(solved, TRUTH, rtol=1e-7, atol=1e-12)
