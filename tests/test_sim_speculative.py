"""Simulated runs with multi-token decoders: tokens per step, KV budget, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures_records import assert_tokens_conserved
from scenario_helpers import SCENARIOS, assert_records_identical, step_by_step

from simulator.catalogs.models import get_model
from simulator.run import replica_kv_blocks, simulate
from workbench.errors import WorkbenchError
from workbench.metrics.decode_emissions import decode_emissions
from workbench.scenario.loader import load_scenario
from workbench.scenario.scenario import Scenario

SMALL = ["workload.num_requests=60", "workload.arrival.rate_per_s=4"]


def speculative(*overrides: str) -> Scenario:
    return load_scenario(SCENARIOS / "speculative_sim.yaml", [*SMALL, *overrides])


def lookahead(*overrides: str) -> Scenario:
    return load_scenario(SCENARIOS / "lookahead_sim.yaml", [*SMALL, *overrides])


def test_rate_one_emits_k_plus_one_tokens_per_decode_step() -> None:
    records = simulate(speculative("decoder.acceptance.rate=1.0"))
    assert_tokens_conserved(records)
    histogram = decode_emissions(records).histogram(room=4)
    assert histogram.sum() > 100 and histogram[5] == histogram.sum()  # all k + 1 = 5
    steps = records.steps
    assert steps.accepted_tokens.sum() == steps.drafted_tokens.sum()


def test_rate_zero_emits_like_vanilla() -> None:
    spec = simulate(speculative("decoder.acceptance.rate=0.0"))
    vanilla = simulate(speculative("decoder={kind: vanilla}"))
    assert_tokens_conserved(spec)
    assert np.array_equal(spec.requests.output_tokens, vanilla.requests.output_tokens)
    assert (spec.emissions.tokens_per_step == 1).all()
    assert spec.steps.accepted_tokens.sum() == 0 and spec.steps.drafted_tokens.sum() > 0
    decodes = (spec.requests.output_tokens - 1).sum()  # every decode step emits one token
    assert spec.steps.decode_tokens.sum() == vanilla.steps.decode_tokens.sum() == decodes
    assert (spec.steps.duration_s.sum()) > vanilla.steps.duration_s.sum()  # drafting costs


def test_same_seed_reproduces_the_run_and_another_seed_does_not() -> None:
    scenario = speculative("hardware.replicas=2")
    first, again = simulate(scenario), simulate(scenario)
    assert_records_identical(first, again)
    assert_records_identical(first, simulate(step_by_step(scenario)))
    other = simulate(speculative("hardware.replicas=2", "seed=8"))
    assert not np.array_equal(first.steps.accepted_tokens, other.steps.accepted_tokens)


def test_kv_blocks_stay_within_capacity_under_preemption() -> None:
    scenario = speculative(
        "workload.num_requests=120", "workload.arrival.rate_per_s=50",
        "scheduler.kv_cache.num_blocks=900", "decoder.num_speculative_tokens=8",
    )  # fmt: skip
    records = simulate(scenario)
    assert_tokens_conserved(records)
    assert records.requests.preemptions.sum() > 0  # the budget was tight
    assert records.steps.kv_blocks_used.max() <= replica_kv_blocks(scenario)


def test_lookahead_runs_and_emits_its_histogram_mean() -> None:
    records = simulate(lookahead("workload.num_requests=150"))
    assert_tokens_conserved(records)
    histogram = decode_emissions(records).histogram(room=3)
    mean = np.dot(np.arange(len(histogram)), histogram) / histogram.sum()
    assert mean == pytest.approx(1.75, abs=0.05)  # counts 50/30/15/5 → 1 + 0.75
    steps = records.steps
    decoding = steps.decode_tokens > 0
    # Drafted: the G = 5 candidate 4-grams (3 tokens each), as the real decoder records them.
    assert (steps.drafted_tokens[decoding] == 15 * steps.decode_tokens[decoding]).all()
    # Verified: the whole step, W·(N−1) window tokens plus the candidates, per sequence.
    assert (steps.verified_tokens == (5 * 3 + 15) * steps.decode_tokens).all()


def test_speculative_tree_runs() -> None:
    records = simulate(speculative("decoder.tree={kind: static, branching: [3, 2]}"))
    assert_tokens_conserved(records)
    assert decode_emissions(records).histogram().size <= 4  # depth 2: at most 3 per step


def test_verification_costs_less_than_separate_steps_when_memory_bound() -> None:
    spec = simulate(speculative("decoder.acceptance.rate=1.0", "workload.num_requests=5"))
    vanilla = simulate(speculative("decoder={kind: vanilla}", "workload.num_requests=5"))
    decode = lambda r: r.steps.duration_s[r.steps.prefill_tokens == 0].mean()  # noqa: E731
    assert decode(vanilla) < decode(spec) < 5 * decode(vanilla)


def test_draft_weights_and_kv_take_blocks_from_the_target() -> None:
    with_draft = replica_kv_blocks(speculative())
    without = replica_kv_blocks(speculative("decoder={kind: vanilla}"))
    assert with_draft < without
    assert get_model("llama-3.2-1b").num_params == pytest.approx(1.24e9, rel=0.01)


def test_a_draft_without_a_shape_names_decoder_draft() -> None:
    with pytest.raises(WorkbenchError, match=r"decoder\.draft: .*config_path"):
        simulate(speculative("decoder.draft={}"))
    with pytest.raises(WorkbenchError, match=r"decoder\.draft\.name: unknown model 'llama-1b'"):
        simulate(speculative("decoder.draft={name: llama-1b}"))


def test_calibration_without_a_store_names_the_field() -> None:
    with pytest.raises(WorkbenchError, match=r"decoder\.calibrate_from"):
        simulate(speculative("decoder.calibrate_from=abc"))


def test_a_request_that_cannot_hold_its_lookahead_slots_is_refused() -> None:
    # 100 blocks of 16: 99 usable; the longest request fits alone but not with 29 more slots.
    scenario = lookahead(
        "workload.num_requests=3", "scheduler.kv_cache.num_blocks=100",
        "workload.lengths_from_trace=null",
        "workload.prompt_tokens={kind: fixed, value: 1000}",
        "workload.output_tokens={kind: fixed, value: 570}",
    )  # fmt: skip
    with pytest.raises(WorkbenchError, match=r"scheduler\.kv_cache: .*\+29 lookahead slots"):
        simulate(scenario)
