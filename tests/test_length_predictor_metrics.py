"""Length prediction errors: MAE, shares within 50 and 100 tokens, and underestimates."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from real_backend.length_predictor.metrics import length_errors


def test_errors_of_hand_made_predictions() -> None:
    errors = length_errors(np.array([10, 100, 300, 50]), np.array([10, 160, 150, 100]))
    assert errors == {
        "mae": (0 + 60 + 150 + 50) / 4,
        "within_50": 2 / 4,  # exactly 50 counts as within
        "within_100": 3 / 4,
        "underestimated": 2 / 4,
    }
