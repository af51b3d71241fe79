"""Metrics pinned on a hand-made timeline, plus properties of the span arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fixtures_records import RequestSpec, make_records, synthetic_records
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import metrics
from workbench.errors import WorkbenchError
from workbench.records import EmissionSpans, RunRecords, StepRecords
from workbench.scenario.system import SLOConfig

# ---------------------------------------------------------------- the hand-made timeline
#
# replica 0 steps (start, duration) → end:  s0 (0, 1) → 1.0   s1 (1, .5) → 1.5
#   s2 (1.5, .5) → 2.0   [idle 2.0 – 4.0]   s3 (4, 1) → 5.0   s4 (5, .5) → 5.5
#   s5 (5.5, .25) → 5.75
# replica 1 steps: s0 (.5, .25) → 0.75   s1 (.75, .75) → 1.5   s2 (1.5, .5) → 2.0
#
# A (id 0) arrives 0.0, emits on r0 s0..s2, 1 token each: at 1.0, 1.5, 2.0
# B (id 1) arrives 0.5, one token on r1 s0: at 0.75                 (TPOT undefined)
# C (id 2) arrives 0.5, 3 tokens per step on r1 s1..s2: at 1.5, 2.0 (multi-token emission)
# D (id 3) arrives 1.0, preempted: r0 s1..s2, then r0 s3..s5: 1.5, 2.0 | 5.0, 5.5, 5.75
# E (id 4) arrives 1.5, emits on r0 s2..s4: 2.0, 5.0, 5.5  (one span across the idle gap)
# F (id 5) arrives 5.0, emits on r0 s5 (5.75), unfinished: excluded from every metric
STEPS = {
    0: [(0.0, 1.0), (1.0, 0.5), (1.5, 0.5), (4.0, 1.0), (5.0, 0.5), (5.5, 0.25)],
    1: [(0.5, 0.25), (0.75, 0.75), (1.5, 0.5)],
}
REQUESTS = [
    RequestSpec(0, 0.0, [(0, 0, 2, 1)]),
    RequestSpec(1, 0.5, [(1, 0, 0, 1)]),
    RequestSpec(2, 0.5, [(1, 1, 2, 3)]),
    RequestSpec(3, 1.0, [(0, 1, 2, 1), (0, 3, 5, 1)], preemptions=1),
    RequestSpec(4, 1.5, [(0, 2, 4, 1)]),
    RequestSpec(5, 5.0, [(0, 5, 5, 1)], status="unfinished"),
]


@pytest.fixture
def timeline() -> RunRecords:
    return make_records(STEPS, REQUESTS)


def test_ttft(timeline: RunRecords) -> None:
    s = metrics.summarize(timeline)
    # TTFT: A 1.0, B 0.25, C 1.0, D 0.5, E 0.5 → ms sorted 250, 500, 500, 1000, 1000
    assert s["n_ttft"] == 5
    assert s["mean_ttft_ms"] == pytest.approx(650.0)  # 3250 / 5
    assert s["median_ttft_ms"] == pytest.approx(500.0)  # index 2
    assert s["p90_ttft_ms"] == pytest.approx(1000.0)  # index 3.6 between 1000 and 1000
    assert s["p99_ttft_ms"] == pytest.approx(1000.0)
    # deviations −400, −150, −150, 350, 350 → (160000 + 2·22500 + 2·122500) / 5 = 90000
    assert s["std_ttft_ms"] == pytest.approx(300.0)


def test_tpot_excludes_one_token_requests(timeline: RunRecords) -> None:
    s = metrics.summarize(timeline)
    # (E2E − TTFT) / (tokens − 1): A (2−1)/2 = .5, C (1.5−1)/5 = .1, D (4.75−.5)/4 = 1.0625,
    # E (4−.5)/2 = 1.75; B has one token → ms sorted 100, 500, 1062.5, 1750
    assert s["n_tpot"] == 4
    assert s["mean_tpot_ms"] == pytest.approx(853.125)  # 3412.5 / 4
    assert s["median_tpot_ms"] == pytest.approx(781.25)  # index 1.5: 500 + .5·562.5
    assert s["p90_tpot_ms"] == pytest.approx(1543.75)  # index 2.7: 1062.5 + .7·687.5
    assert s["p99_tpot_ms"] == pytest.approx(1729.375)  # index 2.97: 1062.5 + .97·687.5


def test_e2e(timeline: RunRecords) -> None:
    s = metrics.summarize(timeline)
    # E2E: A 2.0, B .25, C 1.5, D 4.75, E 4.0 → ms sorted 250, 1500, 2000, 4000, 4750
    assert s["n_e2el"] == 5
    assert s["mean_e2el_ms"] == pytest.approx(2500.0)  # 12500 / 5
    assert s["median_e2el_ms"] == pytest.approx(2000.0)
    assert s["p90_e2el_ms"] == pytest.approx(4450.0)  # index 3.6: 4000 + .6·750
    assert s["p99_e2el_ms"] == pytest.approx(4720.0)  # index 3.96: 4000 + .96·750


def test_itl_counts_emissions_not_tokens_and_uses_end_times(timeline: RunRecords) -> None:
    s = metrics.summarize(timeline)
    # A: .5, .5   B: none   C: .5 (one gap: its 3 tokens per step arrive together)
    # D: .5 | 3.0 across its two spans (2.0 → 5.0) | .5, .25
    # E: 3.0 (2.0 → 5.0: end times across the idle gap, not the 1.0 s duration), .5
    # → ms sorted: 250, 500 ×6, 3000 ×2 (n = 9, sum 9250)
    assert s["n_itl"] == 9
    assert s["mean_itl_ms"] == pytest.approx(9250 / 9)
    assert s["median_itl_ms"] == pytest.approx(500.0)  # index 4
    assert s["p90_itl_ms"] == pytest.approx(3000.0)  # index 7.2
    assert s["p99_itl_ms"] == pytest.approx(3000.0)
    values, counts = metrics.itl_sample(timeline)
    # index 6.4 of the sample: 500 + .4·(3000 − 500)
    assert metrics.weighted_quantile_cont(values * 1000, counts, 0.8) == pytest.approx(1500.0)


def test_throughput_tokens_and_steps(timeline: RunRecords) -> None:
    s = metrics.summarize(timeline)
    # duration: last finish of a completed request (D, 5.75) − first arrival (A, 0.0)
    assert s["duration"] == pytest.approx(5.75)
    assert (s["completed"], s["num_requests"]) == (5, 6)
    # output tokens A 3 + B 1 + C 6 + D 5 + E 3 = 18; prompts 5 × 10
    assert (s["total_input_tokens"], s["total_output_tokens"]) == (50, 18)
    assert s["request_throughput"] == pytest.approx(5 / 5.75)
    assert s["output_throughput"] == pytest.approx(18 / 5.75)
    assert s["total_token_throughput"] == pytest.approx(68 / 5.75)
    # emissions A 3, B 1, C 2, D 5, E 3 = 14 carrying 18 tokens
    assert s["mean_tokens_per_emission"] == pytest.approx(18 / 14)
    # batch sizes: r0 1, 2, 3, 2, 2, 2 and r1 1, 1, 1 → 15 / 9
    assert s["mean_batch_size"] == pytest.approx(15 / 9)
    assert s["preemptions"] == 1
    assert s["request_goodput"] is None  # no SLO given
    assert "slo_ttft_attainment" not in s


def test_goodput_and_attainment(timeline: RunRecords) -> None:
    slo = SLOConfig(ttft_ms=600, tpot_ms=600, e2e_ms=2000)
    s = metrics.summarize(timeline, slo)
    # TTFT ≤ 600: B, D, E → 3/5.   TPOT ≤ 600: A, C, and B (no TPOT, cannot break it) → 3/5
    # E2E ≤ 2000: A (exactly 2000 meets), B, C → 3/5.   All three: only B.
    assert s["slo_ttft_attainment"] == pytest.approx(0.6)
    assert s["slo_tpot_attainment"] == pytest.approx(0.6)
    assert s["slo_e2e_attainment"] == pytest.approx(0.6)
    assert s["request_goodput"] == pytest.approx(1 / 5.75)
    only_ttft = metrics.summarize(timeline, SLOConfig(ttft_ms=600))
    assert only_ttft["request_goodput"] == pytest.approx(3 / 5.75)
    assert "slo_tpot_attainment" not in only_ttft


def test_request_metrics_columns(timeline: RunRecords) -> None:
    m = metrics.request_metrics(timeline)
    np.testing.assert_allclose(m["ttft_s"], [1.0, 0.25, 1.0, 0.5, 0.5, np.nan])
    np.testing.assert_allclose(m["e2e_s"], [2.0, 0.25, 1.5, 4.75, 4.0, np.nan])
    np.testing.assert_allclose(m["tpot_s"], [0.5, np.nan, 0.1, 1.0625, 1.75, np.nan])
    assert m["emissions"].tolist() == [3, 1, 2, 5, 3, 1]
    assert m["finished"].tolist() == [True] * 5 + [False]


def test_no_completed_request_gives_none_not_nan() -> None:
    records = make_records(STEPS, [RequestSpec(0, 0.0, [(0, 0, 1, 1)], status="unfinished")])
    s = metrics.summarize(records, SLOConfig(ttft_ms=100))
    assert s["completed"] == 0 and s["n_ttft"] == 0 and s["n_itl"] == 0
    assert s["mean_ttft_ms"] is None and s["request_throughput"] is None
    assert s["request_goodput"] is None and s["slo_ttft_attainment"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.values())


def test_bad_step_numbering_is_reported(timeline: RunRecords) -> None:
    timeline.steps.step[2] = 7  # replica 0 skips from step 1 to step 7
    with pytest.raises(WorkbenchError, match=r"steps\.step"):
        metrics.summarize(timeline)


def test_span_beyond_the_steps_is_reported(timeline: RunRecords) -> None:
    timeline.emissions.last_step[0] = 99
    with pytest.raises(WorkbenchError, match="outside"):
        metrics.summarize(timeline)


def test_summary_is_nan_free_on_synthetic_runs() -> None:
    s = metrics.summarize(synthetic_records(2000, 4000, 4000), SLOConfig(ttft_ms=300))
    numbers = {k: v for k, v in s.items() if k != "saturation"}  # the one sentence
    assert all(v is None or math.isfinite(v) for v in numbers.values())
    assert isinstance(s["saturation"], str) and isinstance(s["saturated"], bool)
    assert s["n_itl"] > s["completed"]


# ---------------------------------------------------------------- properties

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(finite, st.integers(0, 6)), min_size=1, max_size=40),
    st.floats(min_value=0, max_value=1),
)
def test_weighted_quantile_equals_numpy_on_the_repeated_sample(
    pairs: list[tuple[float, int]], q: float
) -> None:
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    if counts.sum() == 0:
        counts[0] = 1
    expected = np.quantile(np.repeat(values, counts), q)
    assert metrics.weighted_quantile_cont(values, counts, q) == expected  # bit for bit


@st.composite
def span_layouts(draw: st.DrawFn) -> RunRecords:
    """Random steps (with idle gaps) and requests whose spans follow each other in time."""
    n_replicas = draw(st.integers(1, 3))
    steps: dict[int, list[tuple[float, float]]] = {}
    for r in range(n_replicas):
        t, rows = r / 8, []  # replica offsets keep end times distinct across replicas
        for _ in range(draw(st.integers(1, 10))):
            t += draw(st.integers(0, 3))  # idle gap
            duration = float(draw(st.integers(1, 3)))
            rows.append((t, duration))
            t += duration
        steps[r] = rows
    points = sorted(((s + d, r, i) for r, rows in steps.items() for i, (s, d) in enumerate(rows)))
    requests = [
        RequestSpec(k, 0.0, _split_into_spans(draw, points), status=draw(_statuses))
        for k in range(draw(st.integers(1, 6)))
    ]
    return make_records(steps, [q for q in requests if q.spans])


_statuses = st.sampled_from(["finished", "finished", "unfinished"])


def _split_into_spans(draw: st.DrawFn, points: list[tuple[float, int, int]]) -> list:
    chosen = [p for p in points if draw(st.booleans())]
    spans: list[list[int]] = []
    for _, replica, step in chosen:
        last = spans[-1] if spans else None
        if last and last[0] == replica and last[2] == step - 1 and draw(st.booleans()):
            last[2] = step  # extend the span; otherwise a new span starts
        else:
            spans.append([replica, step, step, draw(st.integers(1, 3))])
    return [tuple(s) for s in spans]


def _naive_itl(records: RunRecords) -> np.ndarray:
    """Expand every span to its emission times, then diff per request."""
    steps = records.steps
    end = {
        (int(r), int(i)): float(s + d)
        for r, i, s, d in zip(
            steps.replica, steps.step, steps.start_s, steps.duration_s, strict=True
        )
    }
    finished = dict(
        zip(records.requests.request_id, records.requests.status == "finished", strict=True)
    )
    times: dict[int, list[float]] = {}
    e = records.emissions
    for q, r, a, b in zip(e.request_id, e.replica, e.first_step, e.last_step, strict=True):
        if finished[q]:
            times.setdefault(int(q), []).extend(end[(int(r), i)] for i in range(a, b + 1))
    gaps = [np.diff(sorted(t)) for t in times.values()]
    return np.sort(np.concatenate(gaps)) if gaps else np.empty(0)


def _shuffled(records: RunRecords, seed: int) -> RunRecords:
    """The same records with step and span rows in random order."""
    rng = np.random.default_rng(seed)
    s, e = records.steps, records.emissions
    ps, pe = rng.permutation(len(s.step)), rng.permutation(len(e.request_id))
    steps = StepRecords(**{k: v[ps] for k, v in vars(s).items()})
    spans = EmissionSpans(**{k: v[pe] for k, v in vars(e).items()})
    return RunRecords(records.requests, steps, spans, records.info)


@settings(max_examples=200, deadline=None)
@given(span_layouts(), st.integers(0, 2**31))
def test_itl_from_spans_equals_itl_from_expanded_emissions(records: RunRecords, seed: int) -> None:
    expected = _naive_itl(records)
    for candidate in (records, _shuffled(records, seed)):
        values, counts = metrics.itl_sample(candidate)
        np.testing.assert_array_equal(np.sort(np.repeat(values, counts)), expected)
