"""Bulk stepping (a decode span between scheduling events at once) = one simpy event per step."""

from __future__ import annotations

import pytest
from scenario_helpers import SCENARIOS, assert_records_identical, quickstart, step_by_step

from simulator.run import simulate
from workbench.scenario.loader import load_scenario

CASES = {
    "chunked prefill, poisson": [],
    "whole prefills, 2 replicas, round robin": [
        "hardware.replicas=2",
        "scheduler.chunked_prefill=false",
        "scheduler.max_batched_tokens=16384",
        "workload.arrival.rate_per_s=20",
    ],
    "KV pressure with preemptions": [
        "scheduler.kv_cache.num_blocks=1200",
        "workload.arrival.rate_per_s=12",
    ],
    "closed loop, least outstanding": [
        "workload.arrival={kind: closed_loop, concurrency: 12, think_time_s: 0.2}",
        "hardware.replicas=3",
        "routing.kind=least_outstanding",
    ],
    "gamma bursts": ["workload.arrival={kind: gamma, rate_per_s: 8, cv: 4}"],
    "static batching": ["scheduler={kind: static, batch_size: 8, max_wait_s: 0.5}"],
}


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_bulk_equals_step_by_step(overrides: list[str]) -> None:
    scenario = quickstart("workload.num_requests=400", *overrides)
    bulk = simulate(scenario)
    stepped = simulate(step_by_step(scenario))
    assert len(bulk.steps.step) > len(bulk.requests.request_id)  # many decode steps were bulked
    assert_records_identical(bulk, stepped)


def test_preemption_case_really_preempts() -> None:
    scenario = quickstart("workload.num_requests=400", *CASES["KV pressure with preemptions"])
    assert simulate(scenario).requests.preemptions.sum() > 0


def test_bulk_equals_step_by_step_on_the_vidur_profile() -> None:
    path = SCENARIOS / "vidur_llama2_70b_tp2_a100.yaml"
    scenario = load_scenario(path, ["workload.num_requests=150"])
    assert_records_identical(simulate(scenario), simulate(step_by_step(scenario)))
