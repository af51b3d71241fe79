"""A probe pass measured in a slow spell of the machine is left out of the fit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from calibration_helpers import grid_works, points_of, profile, truth

from simulator.cost_models.calibrated import CalibratedCostModel, fit_profile, step_work
from simulator.cost_models.calibrated_fit import SPELL_RATIO, Curve
from workbench.store.profiles import ProfilePoint


def three_passes(spell: float, spell_probe: str = "b@2") -> list[ProfilePoint]:
    """The grid's steps as two probes (`a`, `b`) in three passes each, every step of
    `spell_probe` measured `spell` times slower than the truth."""
    works = grid_works()
    halves = {"a": works[::2], "b": works[1::2]}
    points = []
    for index in (1, 2, 3):
        for name, part in halves.items():
            run = f"{name}@{index}"
            slow = spell if run == spell_probe else 1.0
            points += points_of(part, [slow * truth().step_time_s(w) for w in part], run)
    return points


def max_error(points: list[ProfilePoint]) -> float:
    fitted = CalibratedCostModel(fit_profile(points, profile()))
    clean = three_passes(1.0)
    predicted = np.array([fitted.step_time_s(step_work(p)) for p in clean])
    return float(np.abs(predicted / np.array([p.step_s for p in clean]) - 1).max())


def test_a_pass_run_in_a_slow_spell_is_dropped_and_the_truth_fitted_back() -> None:
    assert max_error(three_passes(1.0)) < 1e-6
    assert max_error(three_passes(1.8)) < 1e-6


def test_a_pass_within_the_spell_ratio_stays_in() -> None:
    points = three_passes(1.1)
    assert SPELL_RATIO > 1.1
    fit = fit_profile(points, profile())
    assert fit.points_dropped == 0 and max_error(points) > 0.01


def test_probes_of_fewer_than_three_passes_are_never_judged() -> None:
    points = [p for p in three_passes(1.8) if not p.probe.endswith("@3")]
    assert fit_profile(points, profile()).points_dropped == 0


def test_calibrate_says_what_it_left_out_and_the_price_of_uneven_contexts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from workbench.cli import _print_fit_terms

    fit = fit_profile(three_passes(1.8), profile())
    spread = Curve(np.array([2.0, 8.0]), np.array([0.5e-3, 1.5e-3]))
    after = Curve(np.array([32.0, 512.0]), np.array([0.3e-3, 1.2e-3]))
    curves = {"spread_decode": spread, "spread_verify": spread, "after_1": after}
    fit = dataclasses.replace(fit, curves=fit.curves | curves, terms=fit.terms | {"p_pad": 1.5e-7})
    _print_fit_terms(CalibratedCostModel(fit))  # a profile from before the one-call rule
    out = capsys.readouterr().out
    assert f"left out of the fit: {fit.points_dropped} steps" in out and fit.points_dropped
    for curve in ("decode", "verify"):
        assert f"uneven {curve} contexts, by batch (a step's price per unit of 1 − mean / " in out
    assert "longest context): 2 +0.50 ms, 8 +1.50 ms" in out
    assert "padding to a group's longest context: 0.150 µs a padded key" in out
    assert "after a prefill, by prompt tokens computed and read: 32 +0.30 ms, 512 +1.20" in out
    no_spread = {k: v for k, v in fit.curves.items() if not k.startswith("spread_")}
    ruled = dataclasses.replace(fit, curves=no_spread, one_call_padding=1024.0)
    _print_fit_terms(CalibratedCostModel(ruled))  # as a profile with the rule fits
    out = capsys.readouterr().out
    assert "a step padding under 1024 query-keys (T) in all runs in one call" in out
    assert "cut into groups: T as keys, then 0.150 µs a query-key of 2·sqrt(Q·T) − 2T" in out
    assert "uneven" not in out and "padded key" not in out
