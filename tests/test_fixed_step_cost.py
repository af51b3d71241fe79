"""The memory-bound cost model: every step takes the same time."""

from __future__ import annotations

import numpy as np
import pytest
from scenario_helpers import SCENARIOS

from simulator.cost_models.base import StepWork
from simulator.cost_models.fixed_step import FixedStepCostModel
from simulator.run import simulate
from workbench.scenario.loader import load_scenario
from workbench.sweep import expand


def test_step_time_ignores_batch_context_and_prefill() -> None:
    cost = FixedStepCostModel(step_ms=12.5)
    works = [
        StepWork(decode_batch_size=1, decode_context_sum=10),
        StepWork(decode_batch_size=256, decode_context_sum=100_000),
        StepWork(prefill_chunk_tokens=(4096, 10), prefill_context_tokens=(0, 0)),
    ]
    assert {cost.step_time_s(w) for w in works} == {0.0125}
    assert np.array_equal(cost.decode_span_s(64, 5000, 4), np.full(4, 0.0125))


def test_a_fixed_step_run_lasts_steps_times_the_step() -> None:
    scenario = load_scenario(SCENARIOS / "seqsched" / "vanilla.yaml")
    memory_bound = expand(scenario, source="vanilla.yaml")[1].scenario
    assert memory_bound.cost_model.kind == "fixed_step"
    records = simulate(memory_bound)
    assert np.allclose(records.steps.duration_s, 0.010)
    assert np.nanmax(records.requests.finish_s) == pytest.approx(0.010 * len(records.steps.step))
