"""Whole simulated runs: reproducibility, conservation of tokens, KV bounds, sane latencies."""

from __future__ import annotations

import numpy as np
from fixtures_records import assert_tokens_conserved
from scenario_helpers import assert_records_identical, quickstart

from simulator.run import replica_kv_blocks, simulate


def test_same_scenario_and_seed_give_identical_results() -> None:
    scenario = quickstart("workload.num_requests=300")
    assert_records_identical(simulate(scenario), simulate(scenario))


def test_another_seed_gives_another_run() -> None:
    a = simulate(quickstart("workload.num_requests=300", "seed=1"))
    b = simulate(quickstart("workload.num_requests=300", "seed=2"))
    assert not np.array_equal(a.requests.finish_s, b.requests.finish_s)


def test_every_request_emits_its_output_length_within_the_kv_budget() -> None:
    scenario = quickstart("workload.num_requests=400", "scheduler.kv_cache.num_blocks=1500")
    records = simulate(scenario)
    assert_tokens_conserved(records)
    assert records.steps.kv_blocks_used.max() <= replica_kv_blocks(scenario)
    req = records.requests
    assert (req.first_token_s > req.arrival_s).all() and (req.finish_s >= req.first_token_s).all()


def test_steps_are_back_to_back_while_busy() -> None:
    steps = simulate(quickstart("workload.num_requests=200")).steps
    gaps = steps.start_s[1:] - (steps.start_s[:-1] + steps.duration_s[:-1])
    assert (gaps > -1e-9).all()  # a step never starts before the previous one ended
