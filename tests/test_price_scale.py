"""`cost_model.price_scale`: a calibrated model's every price times one factor (a machine
faster or slower than at its calibration), and the factor a served run's own steps imply."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from calibration_helpers import grid_works, points_of, truth

from simulator.cost_models.calibrated import (
    CalibratedCostModel,
    predicted_s,
    served_price_scale,
)
from simulator.cost_models.calibrated_fit import Curve
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario

MS = 1e-3
WAKE = Curve(np.array([1.0, 4.0, 16.0]), MS * np.array([0.2, 0.8, 2.0]))
AFTER = Curve(np.array([32.0, 256.0]), MS * np.array([0.5, 2.0]))
QUICKSTART = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"


def _model(scale: float = 1.0) -> CalibratedCostModel:
    fit = truth().fit
    curves = fit.curves | {"wake": WAKE, "after_1": AFTER}
    return CalibratedCostModel(dataclasses.replace(fit, curves=curves), price_scale=scale)


def test_every_price_is_scaled() -> None:
    plain, slow = _model(), _model(1.25)
    for work in grid_works():  # decode, prefill, mixed and verify steps
        assert slow.step_time_s(work) == pytest.approx(1.25 * plain.step_time_s(work))
    assert plain.wake_s(3 * MS) > 0 and plain.after_prefill_s(100, 1) > 0
    assert slow.wake_s(3 * MS) == pytest.approx(1.25 * plain.wake_s(3 * MS))
    assert slow.after_prefill_s(100, 1) == pytest.approx(1.25 * plain.after_prefill_s(100, 1))
    spans = [m.decode_span_s(4, 400, 20, context_max=120) for m in (plain, slow)]
    np.testing.assert_allclose(spans[1], 1.25 * spans[0])


def test_a_served_runs_steps_give_the_scale_that_prices_them() -> None:
    works = grid_works()
    priced = predicted_s(_model(), points_of(works, [0.0] * len(works)))  # history included
    points = points_of(works, list(1.1 * priced))
    for model in (_model(), _model(2.0)):  # read against any model's own scale
        scale = served_price_scale(model, points)
        assert scale == pytest.approx(1.1)
        matched = predicted_s(_model(scale), points)
        assert matched.sum() == pytest.approx(sum(p.step_s for p in points))


def test_a_scenario_sets_it_and_a_bad_one_is_refused() -> None:
    calibrated = "cost_model={kind: calibrated, profile: p, price_scale: 1.5}"
    assert load_scenario(QUICKSTART, [calibrated]).cost_model.price_scale == 1.5
    with pytest.raises(WorkbenchError, match="price_scale") as refused:
        load_scenario(QUICKSTART, [calibrated.replace("1.5", "0")])
    assert "\n" not in str(refused.value)
