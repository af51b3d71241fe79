"""Waking an idle engine: a calibration profile measures the extra time of a step the engine
slept before, the calibrated model fits it as a curve of the idle time, and a simulated
replica adds it to the first step after it sat idle, and to no other."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from calibration_helpers import grid_works, truth
from fake_cost import LinearCost

from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import CalibratedCostModel
from simulator.cost_models.calibrated_fit import Curve, fit_step_costs
from simulator.engine import Simulation
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.routing import RoundRobin
from workbench.workload.requests import Workload

MS = 1e-3
WAKE = Curve(np.array([1.0, 4.0, 16.0, 64.0]), MS * np.array([0.2, 0.8, 2.0, 2.5]))


def waking_truth() -> CalibratedCostModel:
    fit = truth().fit
    return CalibratedCostModel(dataclasses.replace(fit, curves=fit.curves | {"wake": WAKE}))


def test_the_wake_curve_is_fitted_back_from_steps_after_idle() -> None:
    known = waking_truth()
    works = grid_works()
    prefills = [i for i, w in enumerate(works) if w.prefill_chunk_tokens][:12]
    idle = np.zeros(len(works))
    idle[prefills] = MS * np.tile([1.0, 4.0, 16.0, 64.0], 3)
    seconds = [known.step_time_s(w) + known.wake_s(s) for w, s in zip(works, idle, strict=True)]
    fitted = CalibratedCostModel(fit_step_costs(works, seconds, idle_s=idle))
    for idle_ms in (1.0, 2.5, 4.0, 10.0, 64.0):
        assert fitted.wake_s(idle_ms * MS) == pytest.approx(known.wake_s(idle_ms * MS))


def test_waking_is_nothing_without_idle_scaled_below_and_flat_beyond_the_measured() -> None:
    model = waking_truth()
    assert model.wake_s(0.0) == 0.0
    assert model.wake_s(0.5 * MS) == pytest.approx(0.5 * 0.2 * MS)  # half the first knot
    assert model.wake_s(10.0) == pytest.approx(2.5 * MS)  # ten seconds: saturated
    assert truth().wake_s(50 * MS) == 0.0  # a profile that never measured it


class WakingCost(LinearCost):
    def wake_s(self, idle_s: float) -> float:
        return 0.004 if idle_s > 0 else 0.0


def _run(cost: LinearCost) -> np.ndarray:
    """Two lone requests far apart, then two arriving together: TTFT of each."""
    workload = Workload(
        arrival_s=np.array([1.0, 5.0, 9.0, 9.0]),
        prompt_tokens=np.full(4, 32),
        output_tokens=np.full(4, 6),
    )
    policy = ContinuousBatching(
        num_blocks=64, block_size=16, max_batch_size=4, max_batched_tokens=512
    )
    records = Simulation(workload, [policy], [cost], RoundRobin()).run()
    return records.requests.first_token_s - records.requests.arrival_s


def test_a_replica_pays_the_wake_once_per_idle_spell() -> None:
    warm, waking = _run(LinearCost()), _run(WakingCost())
    np.testing.assert_allclose(waking - warm, [0.004, 0.004, 0.004, 0.004])
    prefill = LinearCost().step_time_s(
        StepWork(prefill_chunk_tokens=(32, 32), prefill_context_tokens=(0, 0))
    )
    assert warm[2] == pytest.approx(prefill)  # both prompts in the one step that woke it
