"""The calibrated cost model reproduces its own profile points: a profile measured from a
known model of the fitted family is fitted back exactly, timing spikes left out."""

from __future__ import annotations

import numpy as np
import pytest
from calibration_helpers import grid_works, points_of, truth

from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import (
    CalibratedCostModel,
    fit_errors,
    fit_profile,
    step_work,
)
from simulator.cost_models.calibrated_fit import work_kind
from simulator.cost_models.least_squares import non_negative_least_squares
from workbench.store.profiles import ProfilePoint


def _model_from(seconds: list[float]) -> tuple[CalibratedCostModel, list]:
    points = points_of(grid_works(), seconds)
    return CalibratedCostModel(fit_profile(points)), points


def test_the_fit_reproduces_every_profile_point() -> None:
    known = truth()
    works = grid_works()
    measured = [known.step_time_s(work) for work in works]
    fitted, points = _model_from(measured)
    predicted = np.array([fitted.step_time_s(step_work(p)) for p in points])
    np.testing.assert_allclose(predicted, measured, rtol=1e-9)
    assert {p.kind for p in points} == {"decode", "prefill", "mixed", "verify"}
    for _n, median, p90, total in fit_errors(fitted, points).values():
        assert median < 1e-9 and p90 < 1e-9 and abs(total - 1) < 1e-9


def test_verifications_over_two_contexts_price_their_keys() -> None:
    """Over one context a verification's keys grow with its tokens, and noise decides what
    the fit gives them (a real profile's a_verify came out 0); long contexts pin them."""
    known = truth()
    works = grid_works()
    rng = np.random.default_rng(5)
    measured = [known.step_time_s(w) * (1 + 0.02 * rng.standard_normal()) for w in works]
    fitted, _ = _model_from(measured)
    assert fitted.fit.terms["a_verify"] == pytest.approx(known.fit.terms["a_verify"], rel=0.3)


def test_points_slowed_by_other_processes_are_left_out() -> None:
    known = truth()
    works = grid_works()
    clean = np.array([known.step_time_s(work) for work in works])
    spiked = clean.copy()
    # Among the decode steps, which the design measures several times per knot (a knot
    # measured once cannot tell a stall from its cost).
    decodes = [i for i, work in enumerate(works) if work_kind(work) == "decode"]
    hit = np.array(decodes[::12])
    spiked[hit] *= 5.0  # the process was descheduled mid-step
    fitted, points = _model_from(list(spiked))
    predicted = np.array([fitted.step_time_s(step_work(p)) for p in points])
    np.testing.assert_allclose(predicted, clean, rtol=1e-6)
    assert fitted.fit.points_dropped == len(hit)


def test_prices_between_and_beyond_the_knots_follow_the_curves() -> None:
    fitted, _ = _model_from([truth().step_time_s(w) for w in grid_works()])
    decode = fitted.fit.curves["decode"]
    # Halfway between knots 4 and 8: the mean of their values; past 16: the last slope.
    assert np.isclose(decode(6.0)[0], (decode(4.0)[0] + decode(8.0)[0]) / 2)
    slope = decode(16.0)[0] - decode(12.0)[0]
    assert np.isclose(decode(20.0)[0], decode(16.0)[0] + slope)


def test_a_decode_span_equals_its_single_steps_bit_for_bit() -> None:
    fitted, _ = _model_from([truth().step_time_s(w) for w in grid_works()])
    for batch, context in ((1, 17), (5, 333), (16, 4000), (40, 9000)):
        span = fitted.decode_span_s(batch, context, 50)
        works = [
            StepWork(decode_batch_size=batch, decode_context_sum=context + i * batch)
            for i in range(50)
        ]
        singles = [fitted.step_time_s(work) for work in works]
        assert span.tolist() == singles


def test_costs_stay_non_negative_where_the_data_would_bend_them() -> None:
    # Decode steps only, measured faster at long contexts (noise): the cost per key would
    # come out negative in plain least squares; it is held at 0.
    works = [StepWork(decode_batch_size=4, decode_context_sum=c) for c in (100, 200, 400, 800)]
    seconds = [2.0e-3, 1.99e-3, 1.98e-3, 1.97e-3]
    fitted = CalibratedCostModel(fit_profile(points_of(works, seconds)))
    assert fitted.fit.terms["a_decode"] == 0.0
    assert np.isclose(fitted.step_time_s(works[0]), np.mean(seconds), rtol=0.02)


def test_non_negative_least_squares_matches_a_hand_solution() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = np.array([2.0, -1.0, 1.0])
    # Unconstrained: x = (5/3, −2/3); with x ≥ 0 the second is 0 and the first
    # minimises (x − 2)² + (x − 1)²: x = 1.5.
    np.testing.assert_allclose(non_negative_least_squares(a, b), [1.5, 0.0], atol=1e-12)


def test_non_negative_least_squares_meets_the_optimality_conditions() -> None:
    rng = np.random.default_rng(3)
    a = rng.random((400, 12))  # (n, params): tall, solved on its QR factor
    b = a @ np.where(rng.random(12) < 0.5, 0.0, rng.random(12)) + rng.normal(0, 0.05, 400)
    b -= 0.3 * a[:, 0]  # pushes the first parameter against its bound
    x = non_negative_least_squares(a, b)
    gradient = a.T @ (b - a @ x)  # (params,) minus the objective's gradient, halved
    assert (x >= 0).all() and x[0] == 0.0
    np.testing.assert_allclose(gradient[x > 0], 0.0, atol=1e-9)
    assert (gradient[x == 0] <= 1e-9).all()  # no bound parameter would lower the residual


def test_alike_columns_give_their_weight_to_the_first() -> None:
    # Columns 1 and 2 are equal on every row (no point between two knots): the solution is
    # not unique, and the first takes it, not the factorisation's rounding.
    rng = np.random.default_rng(4)
    base = rng.random((300, 3))
    a = np.column_stack([base[:, 0], base[:, 1], base[:, 1], base[:, 2]])
    b = a @ np.array([1.0, 0.7, 0.0, 2.0])
    np.testing.assert_allclose(non_negative_least_squares(a, b), [1.0, 0.7, 0.0, 2.0], atol=1e-9)


def test_curves_never_fall_with_more_tokens() -> None:
    # Batch 16 measured faster than batch 8 (a quiet spell): the curve stays flat instead.
    batches, seconds = (1, 2, 4, 8, 16), (1.0e-3, 1.2e-3, 1.5e-3, 2.4e-3, 2.0e-3)
    works = [StepWork(decode_batch_size=b, decode_context_sum=b * 10) for b in batches]
    curve = fit_profile(points_of(works, list(seconds))).curves["decode"]
    values = curve(np.array(batches, dtype=float))
    assert (np.diff(values) >= 0).all() and values[-1] == pytest.approx(values[-2])


def test_batch_bands_cover_every_size_once() -> None:
    from simulator.cost_models.calibrated import batch_band

    assert [batch_band(b) for b in (1, 2, 4, 5, 8, 9, 16, 17, 64)] == [
        "1", "2-4", "2-4", "5-8", "5-8", "9-16", "9-16", "17+", "17+",
    ]  # fmt: skip


def served_with_a_slow_band(
    kind: str, low: int, high: int, factor: float
) -> tuple[CalibratedCostModel, list[ProfilePoint], list[bool]]:
    """The model fitted to the grid's true times, and the grid served with the steps of one
    kind at batch `low`-`high` `factor` times slower (largest batches first: the bands must
    still list in batch order); which steps were slowed."""
    known = truth()
    works = grid_works()
    fitted, _ = _model_from([known.step_time_s(w) for w in works])
    slow = [work_kind(w) == kind and low <= w.decode_batch_size <= high for w in works]
    seconds = [
        known.step_time_s(w) * (factor if s else 1.0) for w, s in zip(works, slow, strict=True)
    ]
    return fitted, points_of(works, seconds)[::-1], slow


def test_a_served_runs_steps_are_priced_by_kind_and_decode_band() -> None:
    """Served steps whose decodes at batch 2-4 ran 10 % over the model: that band's summed
    price is 1 / 1.1 of its wall time, every other band and kind exact."""
    from simulator.cost_models.calibrated import served_errors, served_errors_text

    fitted, served, slow = served_with_a_slow_band("decode", 2, 4, 1.1)
    errors = served_errors(fitted, served)
    assert np.isclose(errors["decode, batch 2-4"][3], 1 / 1.1)
    assert errors["decode, batch 2-4"][0] == sum(slow)
    for name, (_n, _median, _p90, total) in errors.items():
        if name not in ("decode", "decode, batch 2-4"):
            assert np.isclose(total, 1.0), name
    bands = [name for name in errors if name.startswith("decode, batch")]
    assert bands == sorted(bands, key=lambda name: int(name.split()[-1].split("-")[0].strip("+")))
    assert "decode, batch 2-4 -9.1% (median |error| 9.1%" in served_errors_text(fitted, served)


def test_a_served_runs_verify_steps_are_priced_by_batch_band() -> None:
    """Verifications at batch 5-8 ran 20 % over the model (a multi-token decoder's host work
    growing with the batch): their band shows it, every other band is exact, and each kind's
    bands follow its total, decode's before verify's."""
    from simulator.cost_models.calibrated import served_errors

    fitted, served, slow = served_with_a_slow_band("verify", 5, 8, 1.2)
    errors = served_errors(fitted, served)
    assert np.isclose(errors["verify, batch 5-8"][3], 1 / 1.2)
    assert errors["verify, batch 5-8"][0] == sum(slow)
    assert np.isclose(errors["verify, batch 1"][3], 1.0)
    assert np.isclose(errors["decode, batch 5-8"][3], 1.0)
    verify_bands = [name for name in errors if name.startswith("verify, batch")]
    assert verify_bands == ["verify, batch 1", "verify, batch 2-4", "verify, batch 5-8"]
    names = list(errors)
    assert max(names.index(n) for n in errors if n.startswith("decode, batch")) < names.index(
        "verify, batch 1"
    )
