"""The monotone bound: the most points one non-decreasing curve can pass within a tolerance."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost_models.monotone_bound import most_within_monotone


def _fits(bands: list[tuple[float, float]]) -> bool:
    """A non-decreasing pick through `bands` in order: always take the lowest value allowed."""
    value = -np.inf
    for low, high in bands:
        value = max(value, low)
        if value > high:
            return False
    return True


def _brute_force(measured: list[float], tolerance: float) -> int:
    bands = [(m * (1 - tolerance), m * (1 + tolerance)) for m in measured]
    for size in range(len(bands), 0, -1):
        if any(_fits(list(c)) for c in itertools.combinations(bands, size)):
            return size
    return 0


def test_a_non_decreasing_curve_keeps_every_point() -> None:
    tokens = np.arange(1.0, 9.0)
    assert most_within_monotone(tokens, tokens**1.5, 0.10) == 8


def test_a_dip_beyond_the_tolerance_costs_one_point() -> None:
    measured = np.array([1.0, 1.0, 1.0, 0.7, 1.0, 1.0])  # 30 % faster at more tokens
    assert most_within_monotone(np.arange(6.0), measured, 0.10) == 5
    assert most_within_monotone(np.arange(6.0), measured, 0.20) == 6


def test_points_are_taken_in_token_order_not_given_order() -> None:
    tokens = np.array([4.0, 1.0, 3.0, 2.0])
    assert most_within_monotone(tokens, tokens, 0.01) == 4
    assert most_within_monotone(tokens, 5.0 - tokens, 0.01) == 1  # decreasing in tokens


def test_two_points_at_one_token_count_are_refused() -> None:
    with pytest.raises(ValueError, match="one measured point per token count"):
        most_within_monotone(np.array([1.0, 1.0]), np.array([2.0, 3.0]), 0.1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.5, 2.0), min_size=1, max_size=8),
    st.sampled_from([0.0, 0.05, 0.1, 0.3]),
)
def test_matches_every_subset_tried(measured: list[float], tolerance: float) -> None:
    tokens = np.arange(float(len(measured)))
    assert most_within_monotone(tokens, np.array(measured), tolerance) == _brute_force(
        measured, tolerance
    )


def test_no_points_fit_none() -> None:
    assert most_within_monotone(np.zeros(0), np.zeros(0), 0.1) == 0
