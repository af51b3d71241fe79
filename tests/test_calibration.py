"""`decoder.calibrate_from`: the simulator replays a stored run's tokens per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from burst_records import (
    calibrated_by_types_alone,
    draw_from,
    kinds_of_request,
    requests_of_their_own,
    sequential_run,
    speculative_meta,
    two_kinds_of_request,
)
from fixtures_records import RequestSpec, make_meta, make_records
from scenario_helpers import SCENARIOS

from simulator.decoders.calibration import calibrate
from simulator.decoders.chain_calibration import SHRINKAGE_GRID
from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.metrics.decode_emissions import decode_emissions
from workbench.records import RunRecords
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore

KNOWN = [0.15, 0.25, 0.3, 0.2, 0.1]  # P(accepted = i), k = 4


def probabilities(counts: np.ndarray) -> np.ndarray:
    return counts / counts.sum()


@pytest.fixture
def store() -> ResultsStore:
    with ResultsStore.open(":memory:") as db:
        yield db


def test_capped_and_prefill_emissions_are_left_out(store: ResultsStore) -> None:
    tokens = iter([1, 5, 5, 2])  # output 14: 1 (prefill) + 1 + 5 + 5 + 2; rooms 12, 11, 6, 1
    records = sequential_run([14], lambda room: next(tokens) - 1, k=4)
    assert records.requests.output_tokens.sum() == 14
    store.write_run(speculative_meta("r1", k=4), records)
    assert calibrate(store, "r1").accepted_counts.tolist() == [1, 0, 0, 0, 2]
    assert decode_emissions(records).histogram().tolist() == [0, 1, 1, 0, 0, 2]


def test_a_preempted_request_re_prefills_and_that_emission_is_not_a_decode() -> None:
    spans = [(0, 0, 3, 1), (0, 7, 9, 1)]  # prefill at 0, decodes 1-3, re-prefill at 7, 8-9
    records = make_records({0: [(i * 0.1, 0.1) for i in range(10)]}, [RequestSpec(0, 0.0, spans)])
    emissions = decode_emissions(records)
    assert emissions.count.tolist() == [3, 2]
    assert emissions.emitted_before.tolist() == [1, 5]


def test_simulation_calibrated_from_a_run_reproduces_its_histogram(store: ResultsStore) -> None:
    real = sequential_run([60] * 400, draw_from(KNOWN, seed=1), k=4)
    store.write_run(speculative_meta("abc123", k=4), real)
    measured = probabilities(calibrate(store, "abc").accepted_counts)
    assert np.abs(measured - KNOWN).max() < 0.02
    scenario = load_scenario(
        SCENARIOS / "speculative_sim.yaml",
        ["workload.num_requests=150", "decoder.calibrate_from=abc"],
    )
    records = simulate(scenario, store=store)
    simulated = probabilities(decode_emissions(records).histogram(room=4)[1:])
    assert decode_emissions(records).histogram(room=4).sum() > 3000
    assert np.abs(simulated - measured).max() < 0.02
    assert records.info["calibrated_from"] == "abc123"


def mean_tokens_per_step(records: RunRecords) -> np.ndarray:
    """(requests,) each request's emitted tokens per decode step."""
    emissions = decode_emissions(records)
    rows = emissions.request_row
    tokens = np.bincount(rows, weights=emissions.tokens * emissions.count)
    return tokens / np.bincount(rows, weights=emissions.count)


def test_a_fixed_draft_s_run_gives_its_twin_request_types(store: ResultsStore) -> None:
    """Requests that accept little and requests that accept much: one pooled histogram
    would give every simulated request the mean; the types give each its own kind."""
    run = sequential_run([200] * 300, two_kinds_of_request(300, 6), k=4)
    store.write_run(speculative_meta("fix1", k=4), run)
    measured = calibrate(store, "fix1")
    assert measured.chain is not None and measured.accepted_counts is not None
    slow_in_run = np.mean(mean_tokens_per_step(run) < 2.5)  # its requests of rate 0.3
    assert measured.chain.type_weights[0] == pytest.approx(slow_in_run, abs=0.02)
    scenario = load_scenario(
        SCENARIOS / "speculative_sim.yaml",
        [
            "workload.lengths_from_trace=null",
            "workload.prompt_tokens={kind: fixed, value: 10}",
            "workload.output_tokens={kind: fixed, value: 200}",
            "workload.num_requests=1500",
            "decoder.calibrate_from=fix1",
        ],
    )
    simulated = mean_tokens_per_step(simulate(scenario, store=store))
    # 1,500 draws of a type: a share within 0.05 is about four standard deviations.
    assert np.mean(simulated < 2.5) == pytest.approx(measured.chain.type_weights[0], abs=0.05)


def test_as_many_request_types_as_the_run_holds(store: ResultsStore) -> None:
    """Five kinds of request, a fifth each: the fit finds five types, not the three a lower
    cap on BIC's choice would force (which merges kinds and narrows the twin's tails)."""
    rates = (0.1, 0.3, 0.55, 0.8, 0.97)
    store.write_run(
        speculative_meta("five", k=4),
        sequential_run([160] * 600, kinds_of_request(600, rates, 3), k=4),
    )
    chain = calibrate(store, "five").chain
    assert chain is not None and len(chain.type_weights) == 5
    order = np.argsort(chain.type_rates[:, 0])
    assert chain.type_weights[order] == pytest.approx([0.2] * 5, abs=0.05)
    assert chain.type_rates[order, 0] == pytest.approx(rates, abs=0.05)


def test_requests_of_one_kind_are_their_types_alone(store: ResultsStore) -> None:
    """Alike requests differ only by chance: a request's own counts predict its other steps
    worse than the types do, so none is kept."""
    store.write_run(
        speculative_meta("alike", k=4), sequential_run([160] * 200, draw_from(KNOWN, 3), 4)
    )
    chain = calibrate(store, "alike").chain
    assert chain is not None and chain.shrinkage == SHRINKAGE_GRID[-1]
    assert np.abs(chain.sequence_rates - chain.type_rates[0]).max() < 1e-3


def test_requests_of_their_own_rates_keep_them(
    store: ResultsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request with its own rate per position: more than eight types can tell apart, so
    each measured sequence keeps rates of its own, nearer its truth than its types'."""
    truth, accept = requests_of_their_own(150, 5)
    store.write_run(speculative_meta("own", k=4), sequential_run([320] * 150, accept, 4))
    measured = calibrate(store, "own")
    assert measured.chain is not None and measured.chain.shrinkage < SHRINKAGE_GRID[-1]
    mixture = measured.mixture(4)
    assert mixture is not None and np.allclose(mixture.weights, 1 / 150)  # drawn alike
    types_alone = calibrated_by_types_alone(store, "own", monkeypatch).chain
    assert types_alone is not None
    own, typed = (
        abs(c.sequence_rates[:, 0] - truth[:, 0]).mean() for c in (measured.chain, types_alone)
    )
    assert own < 0.8 * typed  # position 1, which every step reaches


def test_a_longer_simulated_draft_accepts_nothing_past_the_run_s_k(store: ResultsStore) -> None:
    store.write_run(
        speculative_meta("fix2", k=4), sequential_run([80] * 100, draw_from(KNOWN, 7), 4)
    )
    mixture = calibrate(store, "fix2").mixture(6)
    assert mixture is not None
    rng, caps = np.random.default_rng(0), np.full(5000, 6)
    for row in range(len(mixture.weights) + 1):  # every type, and the first step
        drawn = mixture.sample(rng, caps, np.full(5000, row))
        assert drawn.max() == 4  # as the run's histogram says: it never accepted more


def test_a_fixed_draft_s_run_without_enough_steps_for_types_keeps_its_histogram(
    store: ResultsStore,
) -> None:
    store.write_run(speculative_meta("fix3", k=4), sequential_run([30] * 20, lambda room: 0, 4))
    measured = calibrate(store, "fix3")
    assert measured.chain is None and measured.accepted_counts is not None
    assert measured.accepted_counts[0] > 0 and measured.accepted_counts[1:].sum() == 0
    assert "drafted position 2" in measured.info()["calibrated_types_unmeasured"]


def test_a_fixed_draft_s_run_whose_records_break_its_k_is_refused(store: ResultsStore) -> None:
    store.write_run(speculative_meta("bad", k=2), sequential_run([60] * 50, draw_from(KNOWN, 3), 4))
    with pytest.raises(WorkbenchError, match="do not follow its decoder configuration"):
        calibrate(store, "bad")


def test_lookahead_calibrates_from_a_speculative_run(store: ResultsStore) -> None:
    store.write_run(
        speculative_meta("spec1", k=4), sequential_run([40] * 50, draw_from(KNOWN, 2), 4)
    )
    scenario = load_scenario(
        SCENARIOS / "lookahead_sim.yaml",
        ["workload.num_requests=20", "decoder.calibrate_from=spec1", "decoder.ngram=6"],
    )
    records = simulate(scenario, store=store)
    assert decode_emissions(records).histogram().size <= 6  # at most 1 + 4 tokens per step


def test_unknown_run_names_the_field(store: ResultsStore) -> None:
    with pytest.raises(WorkbenchError, match=r"decoder\.calibrate_from: no run .*'nope'"):
        calibrate(store, "nope")


def test_a_vanilla_run_cannot_calibrate(store: ResultsStore) -> None:
    records = make_records({0: [(0.0, 0.1), (0.1, 0.1)]}, [RequestSpec(0, 0.0, [(0, 0, 1, 1)])])
    store.write_run(make_meta("van"), records)
    with pytest.raises(WorkbenchError, match=r"decoder\.calibrate_from: run van used the vanilla"):
        calibrate(store, "van")


def test_cli_threads_the_database_to_the_simulator(tmp_path: Path) -> None:
    from workbench.cli import main

    db = tmp_path / "r.duckdb"
    with ResultsStore.open(db) as store:
        store.write_run(
            speculative_meta("feed01", k=4), sequential_run([30] * 20, draw_from(KNOWN, 3), 4)
        )
    args = ["--set", "workload.num_requests=10", "--set", "decoder.calibrate_from=feed"]
    assert main(["run", str(SCENARIOS / "speculative_sim.yaml"), "--db", str(db), *args]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        calibrated = [r for r in store.list_runs() if r["info"].get("calibrated_from")]
    assert [r["info"]["calibrated_from"] for r in calibrated] == ["feed01"]


@pytest.mark.slow
def test_simulation_reproduces_a_real_speculative_run(tmp_path: Path, tiny_zoo: Path) -> None:
    from workbench.cli import main

    db, scenario = str(tmp_path / "r.duckdb"), str(SCENARIOS / "speculative_real.yaml")
    decoder = ["--set", f"model.zoo_dir={tiny_zoo}", "--no-progress"]
    real_run = ["--set", "workload.num_requests=16"]
    assert main(["run", scenario, "--db", db, *decoder, *real_run]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        (real,) = store.list_runs()
    # 3,000 simulated requests: each draws one of the 16 measured sequences, whose own rates
    # differ, so fewer leave the pooled histogram 0.01-0.05 off by the draw seed alone.
    sim = ["--backend", "sim", "--set", "workload.num_requests=3000"]
    sim += ["--set", f"decoder.calibrate_from={real['run_id']}"]
    assert main(["run", scenario, "--db", db, *decoder, *sim]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        measured = probabilities(calibrate(store, real["run_id"]).accepted_counts)
        sim_id = next(r["run_id"] for r in store.list_runs() if r["backend"] == "sim")
        records = store.load_records(sim_id)
    simulated = probabilities(decode_emissions(records).histogram(room=4)[1:])
    assert np.abs(simulated - measured).max() < 0.03
