"""A decode step right after a prefill: a calibration profile measures its extra time (the
prompt's activations evicted the decode's working set), the calibrated model fits it as one
term, and a simulated replica adds it to that step and to no other."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from calibration_helpers import grid_works, points_of, profile, truth
from fake_cost import LinearCost

from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import (
    CalibratedCostModel,
    after_prefill,
    fit_errors,
    fit_profile,
    step_work,
)
from simulator.engine import Simulation
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.routing import RoundRobin
from workbench.workload.requests import Workload

AFTER_S = 4e-4


def alternating_works() -> list[StepWork]:
    """The grid's steps with a one-chunk prefill before every third decode step."""
    works: list[StepWork] = []
    prefill = StepWork(prefill_chunk_tokens=(24,), prefill_context_tokens=(0,))
    for i, work in enumerate(grid_works()):
        if i % 3 == 0 and not work.prefill_chunk_tokens:
            works.append(prefill)
        works.append(work)
    return works


def measured(works: list[StepWork]) -> list[float]:
    flags = after_prefill(points_of(works, [1.0] * len(works)))
    return [
        truth().step_time_s(w) + (AFTER_S if after and not w.prefill_chunk_tokens else 0.0)
        for w, after in zip(works, flags, strict=True)
    ]


def test_only_the_step_right_after_a_prefill_of_the_same_probe_run_is_flagged() -> None:
    decode = StepWork(decode_batch_size=2, decode_context_sum=80)
    prefill = StepWork(prefill_chunk_tokens=(16,), prefill_context_tokens=(0,))
    first = points_of([prefill, decode, decode], [1e-3] * 3, probe="a@1")
    second = points_of([decode, prefill], [1e-3] * 2, probe="b@1")
    assert after_prefill(first + second) == [False, True, False, False, False]


def test_the_after_prefill_term_is_fitted_back_exactly() -> None:
    works = alternating_works()
    points = points_of(works, measured(works))
    fit = fit_profile(points, profile())
    assert fit.after_prefill_s == pytest.approx(AFTER_S, rel=1e-6)
    model = CalibratedCostModel(fit)
    for _n, median, _p90, total in fit_errors(model, points).values():
        assert median < 1e-9 and total == pytest.approx(1.0)


def test_without_the_term_the_small_batches_are_priced_high() -> None:
    works = alternating_works()
    seconds = measured(works)
    blind = [dataclasses.replace(p, step=2 * p.step) for p in points_of(works, seconds)]
    assert after_prefill(blind) == [False] * len(blind)  # no step follows another
    model = CalibratedCostModel(fit_profile(blind, profile()))
    single = StepWork(decode_batch_size=1, decode_context_sum=40)
    assert model.step_time_s(single) > truth().step_time_s(single) * 1.01


class AfterPrefillCost(LinearCost):
    def after_prefill_s(self) -> float:
        return 0.003


def _run(cost: LinearCost, bulk: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Three lone requests far apart (one prefill, then five decode steps each), then two
    arriving together: TTFT and E2E of each."""
    workload = Workload(
        arrival_s=np.array([1.0, 5.0, 9.0, 13.0, 13.0]),
        prompt_tokens=np.full(5, 32),
        output_tokens=np.full(5, 6),
    )
    policy = ContinuousBatching(
        num_blocks=64, block_size=16, max_batch_size=4, max_batched_tokens=512
    )
    records = Simulation(workload, [policy], [cost], RoundRobin(), bulk_steps=bulk).run()
    requests = records.requests
    return requests.first_token_s - requests.arrival_s, requests.finish_s - requests.arrival_s


def test_a_replica_pays_it_on_the_first_decode_step_after_a_prefill_only() -> None:
    (warm_ttft, warm_e2e), (ttft, e2e) = _run(LinearCost()), _run(AfterPrefillCost())
    np.testing.assert_array_equal(ttft, warm_ttft)  # the prefill itself is not priced
    np.testing.assert_allclose(e2e - warm_e2e, 0.003)  # one decode span, its first step
    bulk, stepwise = _run(AfterPrefillCost()), _run(AfterPrefillCost(), bulk=False)
    for a, b in zip(bulk, stepwise, strict=True):
        np.testing.assert_array_equal(a, b)


def test_profiles_without_such_steps_price_none() -> None:
    works = [w for w in grid_works() if not w.prefill_chunk_tokens]
    points = points_of(works, [truth().step_time_s(w) for w in works])
    assert fit_profile(points, profile()).after_prefill_s == 0.0
    assert step_work(points[0]) == works[0]
