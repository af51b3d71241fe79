"""The records invariants (workbench.invariants): they catch planted breaks, every shipped
simulated scenario keeps them, and randomised workloads under every admission policy,
aging included, keep them with bulk stepping equal to step-by-step (issue 21)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_helpers import SCENARIOS, assert_records_identical, quickstart, step_by_step

from simulator.run import simulate
from workbench.invariants import violations
from workbench.records import RunRecords
from workbench.scenario.loader import load_scenario


@pytest.fixture(scope="module")
def small_run() -> RunRecords:
    return simulate(quickstart("workload.num_requests=60", "scheduler.kv_cache.num_blocks=600"))


def test_a_clean_run_has_no_violations(small_run: RunRecords) -> None:
    assert violations(small_run, kv_blocks=600) == []


def _planted(records: RunRecords, table: str, column: str, row: int, value: float) -> RunRecords:
    broken = copy.deepcopy(records)
    getattr(getattr(broken, table), column)[row] = value
    return broken


@pytest.mark.parametrize(
    ("table", "column", "value", "message"),
    [
        ("requests", "output_tokens", 10**6, "output_tokens"),
        ("steps", "emitted_tokens", 10**6, "emitted_tokens"),
        ("steps", "kv_blocks_used", 601, "kv_blocks_used"),
        ("steps", "start_s", -1.0, "starts before"),
        ("requests", "first_token_s", -1.0, "before arrival"),
        ("steps", "accepted_tokens", 3, "accepted_tokens > drafted_tokens"),
        ("steps", "draft_s", 1.0, "draft_s outside"),  # longer than its step
        ("steps", "draft_s", -1e-3, "draft_s outside"),
    ],
)
def test_a_planted_break_is_named(
    small_run: RunRecords, table: str, column: str, value: float, message: str
) -> None:
    row = 5 if table == "steps" else 0
    found = violations(_planted(small_run, table, column, row, value), kv_blocks=600)
    assert any(message in v for v in found), found


def test_a_draft_time_not_recorded_breaks_nothing(small_run: RunRecords) -> None:
    """Runs stored before schema 11 read their draft times as NaN: unknown, not wrong."""
    old = copy.deepcopy(small_run)
    old.steps.draft_s = np.full(len(old.steps.step), np.nan)
    assert violations(old, kv_blocks=600) == []


SIMULATED = sorted(
    p for p in [*SCENARIOS.glob("*.yaml"), *SCENARIOS.glob("*/*.yaml")]
    if "real" not in p.name
)  # fmt: skip


@pytest.mark.parametrize("path", SIMULATED, ids=lambda p: p.stem)
def test_shipped_scenarios_keep_the_invariants(path) -> None:
    records = simulate(load_scenario(path, ["workload.num_requests=150"]))
    kv = records.info.get("kv_blocks_per_engine", records.info.get("kv_blocks_per_replica"))
    kv = None if kv is None else int(kv)  # batch-1 pipeline runs hold no block pool
    fcr = "fcr" in path.stem  # failures restart from zero and re-emit
    assert violations(records, kv, restarts=fcr) == []


ADMISSIONS = [
    "{kind: fcfs}",
    "{kind: shortest_predicted}",
    "{kind: shortest_predicted, aging_s: AGE}",
    "{kind: length_buckets, bucket_tokens: 64, aging_s: AGE}",
    "{kind: shortest_predicted, predictor: {kind: noisy_oracle, spread: 0.5}, aging_s: AGE}",
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    admission=st.sampled_from(ADMISSIONS),
    aging_s=st.sampled_from([0.05, 0.5, 3.0]),
    num_blocks=st.sampled_from([700, 1500, 6000]),
    chunked=st.booleans(),
    rate=st.sampled_from([4, 12, 30]),
)
def test_bulk_equals_step_by_step_under_any_admission(
    seed: int, admission: str, aging_s: float, num_blocks: int, chunked: bool, rate: int
) -> None:
    scenario = quickstart(
        "workload.num_requests=120",
        f"seed={seed}",
        f"workload.arrival.rate_per_s={rate}",
        f"scheduler.admission={admission.replace('AGE', str(aging_s))}",
        f"scheduler.kv_cache.num_blocks={num_blocks}",
        f"scheduler.chunked_prefill={str(chunked).lower()}",
        "scheduler.max_batched_tokens=16384",
        "scheduler.max_batch_size=32",
    )
    bulk = simulate(scenario)
    assert_records_identical(bulk, simulate(step_by_step(scenario)))
    assert violations(bulk, num_blocks) == []
    assert np.all(bulk.requests.status == "finished")
