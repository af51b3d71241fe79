"""Decode steps after a prefill: a calibration profile measures their extra time (the prompt's
activations evicted the decode's working set, more of it the larger the prompt, and the
first few steps after it pay), the calibrated model fits one curve over the prompt tokens
per step after it, and a simulated replica adds them to those steps and to no other."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from calibration_helpers import grid_works, points_of, profile, truth
from fake_cost import LinearCost

from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import (
    CalibratedCostModel,
    fit_errors,
    fit_profile,
    since_prefill,
    step_work,
)
from simulator.cost_models.calibrated_fit import AFTER_PREFILL_STEPS, Curve
from simulator.engine import Simulation
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.routing import RoundRobin
from workbench.workload.requests import Workload

PROMPTS = (16, 64, 256, 1024)
# The k-th decode step after a prefill of P tokens: t_k(P), piecewise linear on the knots the
# fit will place (the prompt sizes measured), fading with k as measured on the CPU engine.
AFTER = {
    k: Curve(np.array(PROMPTS, dtype=float), share * 1e-3 * np.array([0.3, 0.6, 1.2, 2.4]))
    for k, share in ((1, 1.0), (2, 0.4), (3, 0.15))
}


def after_s(tokens: int, k: int) -> float:
    return float(AFTER[k](float(tokens))[0]) if k in AFTER and tokens else 0.0


def works_after_prefills() -> list[StepWork]:
    """The grid's steps with a prefill of each size before every fifth decode step."""
    works: list[StepWork] = []
    decodes = 0
    for work in grid_works():
        if not work.prefill_chunk_tokens and decodes % 5 == 0:
            tokens = PROMPTS[(decodes // 5) % len(PROMPTS)]
            works.append(StepWork(prefill_chunk_tokens=(tokens,), prefill_context_tokens=(0,)))
        decodes += not work.prefill_chunk_tokens
        works.append(work)
    return works


def measured(works: list[StepWork]) -> list[float]:
    since = since_prefill(points_of(works, [1.0] * len(works)))
    return [
        truth().step_time_s(w) + (0.0 if w.prefill_chunk_tokens else after_s(tokens, k))
        for w, (k, tokens) in zip(works, since, strict=True)
    ]


def test_each_step_knows_the_decode_steps_since_the_last_prefill_and_its_tokens() -> None:
    decode = StepWork(decode_batch_size=2, decode_context_sum=80)
    prefill = StepWork(prefill_chunk_tokens=(16,), prefill_context_tokens=(0,))
    mixed = dataclasses.replace(decode, prefill_chunk_tokens=(8,), prefill_context_tokens=(0,))
    first = points_of([prefill, decode, decode, mixed, decode], [1e-3] * 5, probe="a@1")
    assert since_prefill(first) == [(0, 0), (1, 16), (2, 16), (3, 16), (1, 8)]
    # A probe run's first step is no point, but it prefilled what its second step decodes.
    second = points_of([decode, decode, decode], [1e-3] * 3, probe="b@1")
    second = [dataclasses.replace(p, step=p.step + 1) for p in second]
    assert since_prefill(second) == [(1, 78), (2, 78), (3, 78)]
    # A chunk over earlier chunks' KV reaches its own tokens and the cached ones it reads.
    chunk = dataclasses.replace(mixed, prefill_chunk_tokens=(8, 4), prefill_context_tokens=(24, 0))
    third = points_of([prefill, chunk, decode], [1e-3] * 3, probe="c@1")
    assert since_prefill(third) == [(0, 0), (1, 16), (1, 36)]
    # A step not measured: what it computed is not known.
    gap = [dataclasses.replace(p, step=2 * p.step) for p in first[:3]]
    assert since_prefill(gap) == [(0, 0), (0, 0), (0, 0)]


def test_the_curves_are_fitted_back_exactly() -> None:
    works = works_after_prefills()
    points = points_of(works, measured(works))
    fit = fit_profile(points, profile())
    assert fit.after_prefill_steps == AFTER_PREFILL_STEPS
    for k in AFTER:
        for tokens in PROMPTS:
            assert fit.after_prefill_s(tokens, k) == pytest.approx(after_s(tokens, k), rel=1e-6)
        assert fit.after_prefill_s(4 * PROMPTS[-1], k) == fit.after_prefill_s(PROMPTS[-1], k)
    assert fit.after_prefill_s(256, AFTER_PREFILL_STEPS + 1) == 0.0
    model = CalibratedCostModel(fit)
    for _n, median, _p90, total in fit_errors(model, points).values():
        assert median < 1e-9 and total == pytest.approx(1.0)


def test_without_the_terms_the_small_batches_are_priced_high() -> None:
    works = works_after_prefills()
    seconds = measured(works)
    blind = [dataclasses.replace(p, step=2 * p.step) for p in points_of(works, seconds)]
    assert {k for k, _ in since_prefill(blind)} == {0}  # no step follows another
    model = CalibratedCostModel(fit_profile(blind, profile()))
    single = StepWork(decode_batch_size=1, decode_context_sum=40)
    assert model.step_time_s(single) > truth().step_time_s(single) * 1.01


class AfterPrefillCost(LinearCost):
    """3 ms per 32 prompt tokens on the first decode step after a prefill, 1 ms on the
    second, none later."""

    @property
    def after_prefill_steps(self) -> int:
        return 2

    def after_prefill_s(self, prefill_tokens: int, steps_after: int) -> float:
        return {1: 0.003 * prefill_tokens / 32, 2: 0.001}.get(steps_after, 0.0)


def _run(
    cost: LinearCost,
    bulk: bool = True,
    arrivals: tuple[float, ...] = (1.0, 5.0, 9.0, 13.0, 13.0),
    max_batch_size: int = 4,
    chunk_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Requests of 32 prompt tokens and 6 output tokens (one prefill, then five decode steps
    each): TTFT and E2E of each."""
    workload = Workload(
        arrival_s=np.array(arrivals),
        prompt_tokens=np.full(len(arrivals), 32),
        output_tokens=np.full(len(arrivals), 6),
    )
    policy = ContinuousBatching(
        num_blocks=64,
        block_size=16,
        max_batch_size=max_batch_size,
        max_batched_tokens=512,
        chunked_prefill=chunk_size is not None,
        chunk_size=chunk_size or 512,
    )
    records = Simulation(workload, [policy], [cost], RoundRobin(), bulk_steps=bulk).run()
    requests = records.requests
    return requests.first_token_s - requests.arrival_s, requests.finish_s - requests.arrival_s


def test_a_replica_pays_them_on_the_decode_steps_right_after_a_prefill_only() -> None:
    (warm_ttft, warm_e2e), (ttft, e2e) = _run(LinearCost()), _run(AfterPrefillCost())
    np.testing.assert_array_equal(ttft, warm_ttft)  # the prefill itself is not priced
    np.testing.assert_allclose(e2e[:3] - warm_e2e[:3], 0.003 + 0.001)  # lone requests
    np.testing.assert_allclose(e2e[3:] - warm_e2e[3:], 0.006 + 0.001)  # 64 tokens at once
    bulk, stepwise = _run(AfterPrefillCost()), _run(AfterPrefillCost(), bulk=False)
    for a, b in zip(bulk, stepwise, strict=True):
        np.testing.assert_array_equal(a, b)


def test_after_a_chunk_they_are_priced_by_the_cached_tokens_it_read_too() -> None:
    # Prompts of 32 in chunks of 16: the last chunk computes 16 tokens and reads 16 cached.
    (_, warm_e2e), (_, e2e) = (
        _run(cost, chunk_size=16) for cost in (LinearCost(), AfterPrefillCost())
    )
    np.testing.assert_allclose(e2e[:3] - warm_e2e[:3], 0.003 + 0.001)


def test_a_span_cut_after_its_first_step_pays_the_second_in_the_next() -> None:
    # The second request arrives while the first decodes its first step after the prefill:
    # the span stops there, and with one sequence at a time the next span decodes on.
    arrivals, one = (1.0, 1.02), {"arrivals": (1.0, 1.02), "max_batch_size": 1}
    (_, warm_e2e), (_, e2e) = _run(LinearCost(), **one), _run(AfterPrefillCost(), **one)
    np.testing.assert_allclose(e2e[0] - warm_e2e[0], 0.003 + 0.001)
    bulk, stepwise = _run(AfterPrefillCost(), **one), _run(AfterPrefillCost(), False, **one)
    prefill_s, first_decode_s = prefill_and_first_decode_s()
    assert 1.0 + prefill_s < arrivals[1] < 1.0 + prefill_s + first_decode_s
    for a, b in zip(bulk, stepwise, strict=True):
        np.testing.assert_array_equal(a, b)


def prefill_and_first_decode_s() -> tuple[float, float]:
    """How long the first request's prefill takes, and its first decode step after it."""
    cost = AfterPrefillCost()
    prefill = cost.step_time_s(StepWork(prefill_chunk_tokens=(32,), prefill_context_tokens=(0,)))
    decode = cost.step_time_s(StepWork(decode_batch_size=1, decode_context_sum=33))
    return prefill, decode + cost.after_prefill_s(32, 1)


def test_profiles_without_such_steps_price_none() -> None:
    works = [w for w in grid_works() if not w.prefill_chunk_tokens]
    points = points_of(works, [truth().step_time_s(w) for w in works])
    fit = fit_profile(points, profile())
    assert fit.after_prefill_steps == 0 and fit.after_prefill_s(512, 1) == 0.0
    assert step_work(points[0]) == works[0]
