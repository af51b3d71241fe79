"""Adaptive draft length: one rule on both backends, replayed from a run's records."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from burst_records import draw_from, sequential_run, speculative_meta, two_kinds_of_request
from scenario_helpers import SCENARIOS

from simulator.decoders.calibration import calibrate
from simulator.decoders.chain_calibration import replayed_drafts
from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.metrics.decode_emissions import decode_emissions
from workbench.records import RunRecords
from workbench.scenario.decoders import AdaptiveKConfig
from workbench.scenario.loader import load_scenario
from workbench.scheduling.adaptive_draft import AdaptiveDraftLength
from workbench.store.db import ResultsStore

KNOWN = [0.15, 0.25, 0.3, 0.2, 0.1]  # P(a full draft of k = 4 accepts i)
KNOWN_RATES = [0.85, 0.6 / 0.85, 0.3 / 0.6, 0.1 / 0.3]  # P(A ≥ i | A ≥ i − 1)
ADAPTIVE = {"min_tokens": 1, "window": 4}


@pytest.fixture
def store() -> Iterator[ResultsStore]:
    with ResultsStore.open(":memory:") as db:
        yield db


def test_the_rule_drafts_one_more_than_recently_accepted() -> None:
    rule = AdaptiveDraftLength(6, AdaptiveKConfig(min_tokens=2, window=3))
    assert rule.length(1) == 6  # no history: the full draft
    for accepted in (0, 0, 0):
        rule.remember(1, accepted)
    assert rule.length(1) == 2  # ceil(0) + 1, raised to min_tokens
    rule.remember(1, 5)  # window (0, 0, 5): mean 5/3
    assert rule.length(1) == 3
    rule.remember(1, 6)
    rule.remember(1, 6)  # (5, 6, 6): the zeros fell out
    assert rule.length(1) == 6  # ceil(17/3) + 1 = 7, capped at k
    assert rule.length(2) == 6  # each sequence its own history
    rule.release(1)
    assert rule.length(1) == 6 and len(rule) == 0


def _drafted_if_always_rejected(outputs: np.ndarray, k: int) -> int:
    """Every step accepts nothing: a request of n tokens drafts min(k, room) once, then one
    token a step while it has room (its last step has none)."""
    return int(sum(min(k, max(n - 2, 0)) + max(n - 3, 0) for n in outputs.tolist()))


def test_the_simulator_drafts_by_the_rule() -> None:
    always_rejected = "decoder.acceptance={kind: histogram, counts: [1]}"
    adaptive = "decoder.adaptive={min_tokens: 1, window: 4}"
    scenario = load_scenario(
        SCENARIOS / "speculative_sim.yaml",
        ["workload.num_requests=60", always_rejected, adaptive],
    )
    records = simulate(scenario)
    assert records.requests.preemptions.sum() == 0
    expected = _drafted_if_always_rejected(records.requests.output_tokens, k=4)
    assert records.steps.drafted_tokens.sum() == expected
    assert records.steps.emitted_tokens.sum() == records.requests.output_tokens.sum()


def test_an_adaptive_run_calibrates_per_position_rates(store: ResultsStore) -> None:
    adaptive = AdaptiveKConfig(**ADAPTIVE)
    run = sequential_run([60] * 400, draw_from(KNOWN, seed=1), k=4, adaptive=adaptive)
    store.write_run(speculative_meta("ad1", k=4, adaptive=ADAPTIVE), run)
    drafted = run.steps.drafted_tokens[run.steps.decode_tokens > 0]
    assert drafted.mean() < 3.5  # the run drafted fewer than k after poor acceptance
    measured = calibrate(store, "ad1").chain
    assert np.abs(measured.rates - KNOWN_RATES).max() < 0.03
    assert measured.type_weights.tolist() == [1.0]  # one kind of request: one type
    # Its tokens per step, taken as a full draft's histogram, miss long acceptances.
    naive = decode_emissions(run).histogram(room=4)[1:]
    assert naive[4] / naive.sum() < KNOWN[4] - 0.05


def test_request_types_and_the_first_step_are_told_apart(store: ResultsStore) -> None:
    run = sequential_run(
        [80] * 500, two_kinds_of_request(500, 4), 4, adaptive=AdaptiveKConfig(**ADAPTIVE)
    )
    store.write_run(speculative_meta("ad5", k=4, adaptive=ADAPTIVE), run)
    measured = calibrate(store, "ad5").chain
    assert measured.type_weights == pytest.approx([0.4, 0.6], abs=0.05)
    low, high = measured.type_rates
    assert low[:2] == pytest.approx([0.3, 0.3], abs=0.04)  # it seldom drafts more than two
    assert high == pytest.approx([0.9] * 4, abs=0.04)
    assert measured.first_rates[0] == 0.0


def per_decode_step(records: RunRecords) -> np.ndarray:
    """(drafted, accepted) per decoding sequence and step."""
    steps = records.steps
    return (
        np.array([steps.drafted_tokens.sum(), steps.accepted_tokens.sum()])
        / steps.decode_tokens.sum()
    )


def test_simulation_calibrated_from_an_adaptive_run_drafts_and_accepts_as_it_did(
    store: ResultsStore,
) -> None:
    adaptive = AdaptiveKConfig(**ADAPTIVE)
    run = sequential_run([200] * 300, two_kinds_of_request(300, 5), 4, adaptive=adaptive)
    store.write_run(speculative_meta("ad2", k=4, adaptive=ADAPTIVE), run)
    same_lengths = [
        "workload.lengths_from_trace=null",
        "workload.prompt_tokens={kind: fixed, value: 10}",
        "workload.output_tokens={kind: fixed, value: 200}",
    ]
    scenario = load_scenario(
        SCENARIOS / "speculative_sim.yaml",
        [
            *same_lengths,
            "workload.num_requests=3000",
            "workload.arrival.rate_per_s=20",
            "decoder.calibrate_from=ad2",
            f"decoder.adaptive={ADAPTIVE}",
        ],
    )
    records = simulate(scenario, store=store)
    assert len(json.loads(records.info["calibrated_type_weights"])) == 2
    error = per_decode_step(records) / per_decode_step(run) - 1
    # 3000 requests' type shares: about 1.5 % of noise on accepted (seven seeds, at most 3.1 %).
    assert np.abs(error).max() < 0.05


def test_a_simulated_sequence_s_first_step_accepts_as_the_run_s_first_steps_did(
    store: ResultsStore,
) -> None:
    def request() -> Callable[[int], int]:
        steps = iter(range(10**6))
        return lambda room: 0 if next(steps) == 0 else 4  # nothing first, everything after

    run = sequential_run(
        [60] * 50, [request() for _ in range(50)], 4, adaptive=AdaptiveKConfig(**ADAPTIVE)
    )
    store.write_run(speculative_meta("ad6", k=4, adaptive=ADAPTIVE), run)
    scenario = load_scenario(
        SCENARIOS / "speculative_sim.yaml",
        ["workload.num_requests=100", "decoder.calibrate_from=ad6", f"decoder.adaptive={ADAPTIVE}"],
    )
    emissions = decode_emissions(simulate(scenario, store=store))
    first = emissions.emitted_before == 1  # right after the prefill's one token
    assert first.sum() > 90 and (emissions.tokens[first] == 1).all()
    second = emissions.emitted_before == 2  # the rule drafts one after accepting none...
    assert second.sum() == first.sum() and (emissions.tokens[second] == 2).all()  # ...taken


def test_a_longer_draft_than_the_run_drafted_is_refused(store: ResultsStore) -> None:
    run = sequential_run([30] * 20, draw_from(KNOWN, 3), k=4, adaptive=AdaptiveKConfig(**ADAPTIVE))
    store.write_run(speculative_meta("ad3", k=4, adaptive=ADAPTIVE), run)
    with pytest.raises(WorkbenchError, match=r"decoder\.calibrate_from: run ad3 drafted at most 4"):
        calibrate(store, "ad3").distribution(6)


def test_records_that_break_the_rule_are_refused(store: ResultsStore) -> None:
    run = sequential_run([30] * 20, draw_from(KNOWN, 3), k=4)  # a fixed draft of 4...
    store.write_run(speculative_meta("ad4", k=4, adaptive={"min_tokens": 1, "window": 1}), run)
    with pytest.raises(WorkbenchError, match=r"records do not follow its decoder configuration"):
        calibrate(store, "ad4")  # ...stored as an adaptive run


def test_the_replay_drafts_what_the_real_engine_drafted() -> None:
    pytest.importorskip("torch")
    from decoder_models import checked, noisy_copy, one_thread, random_model, serve

    from real_backend.prompts import synthetic_prompts
    from workbench.scenario.decoders import SpeculativeDecoderConfig
    from workbench.workload.requests import Workload

    target = random_model(48, seed=4)
    draft = noisy_copy(target, 0.12, seed=5)
    rng = np.random.default_rng(0)
    n = 24
    w = Workload(np.zeros(n), rng.integers(2, 20, n), rng.integers(30, 90, n))
    adaptive = AdaptiveKConfig(min_tokens=1, window=3)
    cfg = SpeculativeDecoderConfig(kind="speculative", num_speculative_tokens=6, adaptive=adaptive)
    workload = (w, synthetic_prompts(w.prompt_tokens, 48, seed=0))
    # 60 blocks of 4 tokens cannot hold 6 sequences of ~100 tokens: preemptions recompute.
    kw = {"max_batch_size": 6, "num_blocks": 60, "block_size": 4}
    with contextmanager(one_thread)():
        _, records, _ = serve(target, workload, checked(draft, cfg), **kw)
    assert records.requests.preemptions.sum() > 0
    replayed = list(replayed_drafts(decode_emissions(records), 6, adaptive, "decoder"))
    drafted = records.steps.drafted_tokens.sum()
    assert drafted < 5 * len(replayed)  # the rule shortened drafts
    assert sum(step.drafted for step in replayed) == drafted
    assert sum(step.accepted for step in replayed) == records.steps.accepted_tokens.sum()
