"""A lookahead run calibrates its twin: acceptance by output position, and the tokens fed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields

import numpy as np
import pytest
from burst_records import (
    calibrated_by_types_alone,
    draw_from,
    requests_of_their_own,
    sequential_run,
)
from fixtures_records import make_meta
from scenario_helpers import SCENARIOS

from simulator.decoders.calibration import calibrate
from simulator.decoders.candidate_calibration import fill_unreached, measure_candidates
from simulator.decoders.chain_calibration import SHRINKAGE_GRID
from simulator.decoders.position_calibration import MIN_POSITION_EMISSIONS
from simulator.run import simulate
from workbench.metrics.decode_emissions import DecodeEmissions, decode_emissions
from workbench.records import EmissionSpans, RunMeta, RunRecords, StepRecords
from workbench.scenario.decoders import LookaheadDecoderConfig
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore

LOOKAHEAD = {"kind": "lookahead", "window": 5, "ngram": 4, "candidates": 5}  # K = 3
WINDOW = 15  # tokens of the window per sequence and step: N − 1 levels of W
LOOKAHEAD_CONFIG = LookaheadDecoderConfig(**LOOKAHEAD)


@pytest.fixture
def store() -> Iterator[ResultsStore]:
    with ResultsStore.open(":memory:") as db:
        yield db


def lookahead_meta(run_id: str) -> RunMeta:
    config = {"name": "look", "decoder": LOOKAHEAD}
    return make_meta(
        run_id, config=config, backend="real", decoder="lookahead", scenario_name="look"
    )


def warming_up(output: int, cold: int) -> Callable[[int], int]:
    """accept(room) for requests of `output` tokens: none accepted while fewer than `cold`
    tokens are out, all 3 after (a pool that fills from the output)."""
    return lambda room: 0 if output - 1 - room < cold else 3


def mean_tokens(emissions: DecodeEmissions, low: int, high: int) -> float:
    counts = emissions.at_positions(3, low, high)
    return float((emissions.tokens * counts).sum() / counts.sum())


def simulated(
    store: ResultsStore, run: str, output: int, requests: int, rate_per_s: float = 0.5
) -> RunRecords:
    scenario = load_scenario(
        SCENARIOS / "lookahead_sim.yaml",
        [
            "workload.lengths_from_trace=null",
            f"workload.arrival={{kind: poisson, rate_per_s: {rate_per_s}}}",
            "workload.prompt_tokens={kind: fixed, value: 10}",
            f"workload.output_tokens={{kind: fixed, value: {output}}}",
            f"workload.num_requests={requests}",
            f"decoder.calibrate_from={run}",
        ],
    )
    return simulate(scenario, store=store)


def test_the_twin_emits_by_output_position_as_the_run_did(store: ResultsStore) -> None:
    """A run of 100-token outputs, cold for its first 16 tokens; a twin of 300-token outputs
    emits as the run did at each position, so more per step over all than the run's pooled
    histogram would say."""
    run = sequential_run([100] * 200, warming_up(100, 16), k=3)
    store.write_run(lookahead_meta("look1"), run)
    measured = calibrate(store, "look1")
    by_position = measured.by_position(3)
    assert by_position is not None and measured.positions is not None
    assert measured.accepted_counts is not None
    assert len(measured.positions.type_weights) == 1  # every request warms up alike: one type
    starts, rows = by_position.starts.tolist(), by_position.rows[0]
    means = {s: round(r.mean, 6) for s, r in zip(starts, rows, strict=True)}
    assert means[0] == means[8] == 0.0 and means[16] == means[32] == 3.0
    records = simulated(store, "look1", 300, 60)
    emissions = decode_emissions(records)
    assert mean_tokens(emissions, 0, 16) == pytest.approx(1.0)
    assert mean_tokens(emissions, 16, 300) == pytest.approx(4.0)
    pooled = 1.0 + float(np.dot(np.arange(4), measured.accepted_counts) / run_decodes(run))
    assert mean_tokens(emissions, 0, 300) > pooled + 0.5


def run_decodes(run: RunRecords) -> int:
    return int(decode_emissions(run).with_room(3).sum())


def test_requests_that_differ_give_their_twin_request_types(store: ResultsStore) -> None:
    """30 % of the requests accept 1 token a step once warm, 70 % all 3: one set of rows
    would give every simulated request the mean; the types give each its own kind."""
    slow = two_kinds_run(store, "look5")
    measured = calibrate(store, "look5")
    by_position, positions = measured.by_position(3), measured.positions
    assert by_position is not None and positions is not None
    assert sorted(positions.type_weights.tolist()) == pytest.approx([slow.mean(), 1 - slow.mean()])
    late = by_position.row(np.array([64]))[0]
    typed = positions.type_counts[:, late] @ np.arange(4) / positions.type_counts[:, late].sum(1)
    assert sorted(np.round(typed, 2).tolist()) == [1.0, 3.0]
    own = np.array([round(rows[late].mean, 2) for rows in by_position.rows])  # (300,)
    assert ((own == 1.0) == slow).all() and ((own == 3.0) == ~slow).all()  # each its own kind
    emissions = decode_emissions(simulated(store, "look5", 120, 600))
    counts = emissions.at_positions(3, 8, 120)
    per_request = np.bincount(emissions.request_row, weights=emissions.tokens * counts)
    per_request /= np.bincount(emissions.request_row, weights=counts)
    nearest = np.minimum(np.abs(per_request - 2.0), np.abs(per_request - 4.0))
    assert nearest.max() < 0.1  # each request of one kind (the smoothing leaves a trace)
    # 600 draws of a type: a share within 0.06 is over three standard deviations.
    assert np.mean(per_request < 3) == pytest.approx(slow.mean(), abs=0.06)


def test_lookahead_requests_of_one_kind_are_their_types_alone(store: ResultsStore) -> None:
    """Alike requests differ only by chance: half of a request's emissions predict the other
    half worse than its types do, so no request keeps rows of its own."""
    accept = draw_from([0.2, 0.3, 0.3, 0.2], 4)
    store.write_run(lookahead_meta("alike"), sequential_run([160] * 200, accept, k=3))
    positions = calibrate(store, "alike").positions
    assert positions is not None and positions.shrinkage == SHRINKAGE_GRID[-1]
    typed = positions.type_counts / positions.type_counts.sum(axis=2, keepdims=True)
    assert np.abs(positions.sequence_rows - typed[0]).max() < 1e-3


def test_lookahead_requests_of_their_own_rates_keep_them(
    store: ResultsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request with its own acceptance: more than eight types can tell apart, so each
    measured request keeps rows of its own, nearer its truth than its types'."""
    truth, accept = requests_of_their_own(150, 5)
    store.write_run(lookahead_meta("own"), sequential_run([240] * 150, accept, k=3))
    measured = calibrate(store, "own")
    assert measured.positions is not None and measured.positions.shrinkage < SHRINKAGE_GRID[-1]
    by_position = measured.by_position(3)
    assert by_position is not None and np.allclose(by_position.weights, 1 / 150)  # drawn alike
    types_alone = calibrated_by_types_alone(store, "own", monkeypatch).positions
    assert types_alone is not None
    expected = np.cumprod(truth[:, :3], axis=1).sum(axis=1)  # (150,) E[min(accepted, 3)]
    own, typed = (
        abs(p.sequence_rows[:, -1] @ np.arange(4) - expected).mean()
        for p in (measured.positions, types_alone)
    )
    assert own < 0.8 * typed  # the last range, which every request reaches


def two_kinds_run(store: ResultsStore, run_id: str) -> np.ndarray:
    """A stored run of 300 requests of 120 tokens, cold for 8: (300,) True for the 30 % that
    accept 1 token a step once warm, the others all 3."""
    rng = np.random.default_rng(3)
    slow = rng.random(300) < 0.3
    accept = [(lambda room, s=s: 0 if 119 - room < 8 else (1 if s else 3)) for s in slow.tolist()]
    store.write_run(lookahead_meta(run_id), sequential_run([120] * 300, accept, k=3))
    return slow


def test_types_alone_give_each_request_its_own_type_s_rows(
    store: ResultsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shrunk all the way, a request's rows are its types' weighted by its posterior: its own
    type's, not the types' mean."""
    slow = two_kinds_run(store, "look7")
    positions = calibrated_by_types_alone(store, "look7", monkeypatch).positions
    assert positions is not None and positions.shrinkage == SHRINKAGE_GRID[-1]
    late = np.searchsorted(positions.starts, 64, side="right") - 1
    means = positions.sequence_rows[:, late] @ np.arange(4)  # (300,)
    assert np.allclose(means[slow], 1.0, atol=0.02) and np.allclose(means[~slow], 3.0, atol=0.02)


def test_thin_position_ranges_join_the_range_before_them(store: ResultsStore) -> None:
    store.write_run(lookahead_meta("look2"), sequential_run([36] * 60, warming_up(36, 8), k=3))
    positions = calibrate(store, "look2").positions
    assert positions is not None
    counts, starts = positions.counts, positions.starts
    assert starts[0] == 0 and (np.diff(starts) > 0).all()
    assert (counts.sum(axis=1) >= MIN_POSITION_EMISSIONS).all()
    measured = calibrate(store, "look2")
    assert counts.sum(axis=0).tolist() == measured.accepted_counts.tolist()  # every emission once
    assert starts.tolist() == [0, 4, 8, 16]  # past 32 tokens: one emission a request at most


def test_a_range_few_requests_reach_joins_the_range_before_it(store: ResultsStore) -> None:
    """150 requests of 40 tokens and 50 of 100, the long ones accepting 1 token a step past 64
    tokens emitted: past 64 they emit hundreds of times, but only a quarter of the requests do,
    so the range joins 32-64 (the twin would carry it to every later position)."""
    accept = [warming_up(40, 8)] * 150 + [
        (lambda room: 0 if 99 - room < 8 else (1 if 99 - room >= 64 else 3))
    ] * 50
    store.write_run(lookahead_meta("look6"), sequential_run([40] * 150 + [100] * 50, accept, k=3))
    positions = calibrate(store, "look6").positions
    assert positions is not None
    late = decode_emissions(store.load_records("look6")).at_positions(3, 64, 100).sum()
    assert late >= MIN_POSITION_EMISSIONS  # thin by its requests, not its emissions
    assert positions.starts.tolist() == [0, 4, 8, 16, 32]
    assert positions.counts[-1][1] >= late  # the slow late steps are in the range before


def fed_by_position(run: RunRecords, early: Callable[[int], int], late: int = 4) -> np.ndarray:
    """(s,) candidate tokens a sequential run's decoding sequence is fed in each step: early(its
    request) n-grams over its first 8 tokens and `late` after (of a full pool's 5), each cut to
    its room."""
    emissions = decode_emissions(run)
    step, before = emissions.first_step, emissions.emitted_before
    room = emissions.output_tokens - before - 1
    first = [early(r) for r in emissions.request_row.tolist()]
    fed = np.zeros(len(run.steps.step), dtype=np.int64)
    fed[step] = np.where(before < 8, first, late) * np.clip(room, 0, 3)
    return fed


def test_the_twin_feeds_the_run_s_candidates_by_output_position(store: ResultsStore) -> None:
    """The n-grams a sequence is fed, measured by output position from the steps' sums; the
    twin feeds them so, and its own batched steps, measured again, give the same (those whose
    every sequence's request finished)."""
    run = sequential_run([83] * 100, warming_up(83, 8), k=3)  # the last step's room: 2
    fed = fed_by_position(run, lambda request: 1)
    run.steps.verified_tokens = run.steps.decode_tokens * WINDOW + fed  # as the real decoder
    run.steps.drafted_tokens = fed
    store.write_run(lookahead_meta("look3"), run)
    measured = calibrate(store, "look3").candidates
    assert measured is not None
    ngrams = dict(zip(measured.starts.tolist(), measured.ngrams.tolist(), strict=True))
    assert ngrams == pytest.approx({0: 1.0, 4: 1.0, 8: 4.0, 16: 4.0, 32: 4.0, 64: 4.0})
    assert measured.mean_tokens == pytest.approx(fed.sum() / run.steps.decode_tokens.sum())
    twin = simulated(store, "look3", 202, 120, rate_per_s=40.0)
    assert (twin.steps.decode_tokens > 1).mean() > 0.5  # mostly batched
    twin.requests.status[-8:] = "unfinished"  # steps they decoded in are left out of the fit
    store.write_run(lookahead_meta("twin3"), twin)
    again = calibrate(store, "twin3").candidates
    assert again is not None and again.starts[-1] == 128
    assert again.ngrams.tolist() == pytest.approx([1.0, 1.0, 4.0, 4.0, 4.0, 4.0, 4.0])


def test_the_twin_feeds_the_run_s_mean_n_grams_per_position(store: ResultsStore) -> None:
    """Fractional means (early, half the requests 1 n-gram and half 2; 3 later): each sequence
    feeds the floor or the ceiling, so that the mean holds, and records every candidate as
    drafted."""
    run = sequential_run([80] * 100, warming_up(80, 8), k=3)
    fed = fed_by_position(run, lambda request: 1 + request % 2, late=3)
    run.steps.verified_tokens = run.steps.decode_tokens * WINDOW + fed
    run.steps.drafted_tokens = fed
    store.write_run(lookahead_meta("look6"), run)
    measured = calibrate(store, "look6")
    assert measured.candidates is not None
    assert measured.candidates.ngrams.tolist() == pytest.approx([1.5, 1.5, 3, 3, 3, 3], abs=0.02)
    mean = fed.sum() / run.steps.decode_tokens.sum()
    assert float(measured.info()["calibrated_candidate_tokens"]) == pytest.approx(mean, abs=1e-4)
    twin = simulated(store, "look6", 80, 200)
    one = twin.steps.decode_tokens == 1
    window = twin.steps.verified_tokens - twin.steps.drafted_tokens  # (s,)
    assert (window[one] == WINDOW).all()
    assert set(twin.steps.drafted_tokens[one].tolist()) >= {3, 6, 9}  # 1 or 2 n-grams, then 3
    store.write_run(lookahead_meta("twin6"), twin)
    again = calibrate(store, "twin6").candidates
    assert again is not None
    assert again.ngrams[again.starts < 8] == pytest.approx(1.5, abs=0.05)  # 200 requests
    assert again.ngrams[again.starts >= 8] == pytest.approx(3.0, abs=0.02)  # steps they share


def test_a_run_that_did_not_record_its_window_leaves_the_pool_full(store: ResultsStore) -> None:
    """Stored before schema 3, a run's verified tokens were 1 + drafted per sequence: its
    candidate tokens cannot be told from its window, and the twin says so."""
    run = sequential_run([80] * 40, warming_up(80, 8), k=3)
    assert (run.steps.verified_tokens == run.steps.decode_tokens + run.steps.drafted_tokens).all()
    store.write_run(lookahead_meta("old1"), run)
    measured = calibrate(store, "old1")
    assert measured.candidates is None
    assert "window of 15 tokens" in measured.info()["calibrated_candidates_unmeasured"]
    steps = simulated(store, "old1", 80, 10).steps
    assert steps.verified_tokens.sum() / steps.decode_tokens.sum() == 30  # a full pool


def test_a_thin_first_range_joins_the_next(store: ResultsStore) -> None:
    store.write_run(lookahead_meta("look4"), sequential_run([200] * 25, warming_up(200, 8), k=3))
    positions = calibrate(store, "look4").positions
    assert positions is not None
    starts, counts = positions.starts, positions.counts
    # 25 requests emit 3 times each before 4 tokens, 4 times from 4 to 8 and twice from 8 to
    # 16 (4 tokens a step): 8-16 joins 4-8, then the first range (75) joins them.
    assert starts.tolist()[:2] == [0, 16]
    assert (counts.sum(axis=1) >= MIN_POSITION_EMISSIONS).all()


def test_emissions_by_position_count_each_burst_once() -> None:
    """Spans of several steps: the j-th emission comes after emitted_before + j · tokens."""
    rng = np.random.default_rng(0)
    n = 300
    tokens = rng.integers(1, 5, n)
    count = rng.integers(1, 6, n)
    before = rng.integers(0, 60, n)
    emissions = DecodeEmissions(
        request_row=np.arange(n), tokens=tokens, count=count, emitted_before=before,
        output_tokens=before + tokens * count + rng.integers(0, 4, n),
        after_prefill=np.zeros(n, dtype=bool), replica=np.zeros(n, dtype=np.int64),
        first_step=rng.integers(0, 1000, n),
    )  # fmt: skip
    for room, low, high in [(0, 0, 10**6), (3, 0, 10**6), (3, 16, 32), (0, 5, 41), (2, 50, 51)]:
        expected = counted(emissions, room, low, high)
        assert emissions.at_positions(room, low, high).tolist() == expected
        for parity in (0, 1):
            on_steps = emissions.at_positions_on_steps(room, low, high, parity)
            assert on_steps.tolist() == counted(emissions, room, low, high, parity)
    assert (emissions.at_positions(3, 0, 10**6) == emissions.with_room(3)).all()


def counted(
    e: DecodeEmissions, room: int, low: int, high: int, parity: int | None = None
) -> list[int]:
    """Each span's emissions at positions low..high − 1 with room ≥ `room` (with `parity`:
    made on a step of that parity), one by one."""
    spans = zip(e.tokens, e.count, e.emitted_before, e.output_tokens, e.first_step, strict=True)
    return [
        sum(
            low <= b + j * t < high
            and b + j * t <= out - 1 - room
            and (parity is None or (step + j) % 2 == parity)
            for j in range(c)
        )
        for t, c, b, out, step in spans
    ]


def test_a_range_no_fitted_step_reached_takes_its_neighbour_s_n_grams() -> None:
    ngrams, reached = np.array([0.0, 2.0, 0.0, 3.0, 0.0]), np.array([0, 1, 0, 1, 0], bool)
    assert fill_unreached(ngrams, reached).tolist() == [2.0, 2.0, 2.0, 3.0, 3.0]


def test_a_span_opened_by_the_prefill_decodes_from_its_next_step() -> None:
    run = sequential_run([5], lambda room: 0, k=3)  # a prefill step, then 4 of one token each
    one = np.zeros(1, dtype=np.int64)
    run.emissions = EmissionSpans(
        request_id=one, replica=one.astype(np.int32), first_step=one, last_step=one + 4,
        tokens_per_step=np.ones(1, dtype=np.int32),
    )  # fmt: skip
    emissions = decode_emissions(run)
    assert emissions.first_step.tolist() == [1] and emissions.count.tolist() == [4]
    assert emissions.emitted_before.tolist() == [1]


def test_emissions_at_steps_the_run_did_not_record_leave_the_candidates_unmeasured() -> None:
    """The store refuses such records; a run read otherwise gets a reason, not a crash."""
    run = sequential_run([40] * 20, warming_up(40, 8), k=3)
    run.steps.verified_tokens = run.steps.decode_tokens * WINDOW  # no candidates fed
    run.steps.drafted_tokens = np.zeros_like(run.steps.drafted_tokens)
    cut = StepRecords(**{f.name: getattr(run.steps, f.name)[:-1] for f in fields(run.steps)})
    starts = np.array([0, 8])
    measured = measure_candidates(decode_emissions(run), cut, starts, LOOKAHEAD_CONFIG)
    assert measured == "its decode emissions name steps it did not record"
    whole = measure_candidates(decode_emissions(run), run.steps, starts, LOOKAHEAD_CONFIG)
    assert not isinstance(whole, str) and whole.ngrams.tolist() == [0.0, 0.0]
