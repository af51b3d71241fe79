"""A real run beside its simulated twin: step wall times, the error table, the report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures_records import RequestSpec, make_meta, make_records

from reports.build import build_report
from reports.collect import collect_run
from reports.sim_vs_real import error, error_rows, pair_error_text, speed_matched_label
from reports.step_walls import DraftTimes, step_walls
from workbench.store import ResultsStore


def _records(scale: float = 1.0, info: dict[str, str] | None = None):
    """Two requests on one replica, an idle spell between them (steps 1 → 2)."""
    steps = {0: [(0.0, 0.010), (0.012, 0.010), (0.5, 0.010), (0.515, 0.010)]}
    steps = {0: [(start * scale, duration * scale) for start, duration in steps[0]]}
    requests = [
        RequestSpec(0, 0.0, [(0, 0, 1, 1)]),
        RequestSpec(1, 0.49 * scale, [(0, 2, 3, 1)]),
    ]
    records = make_records(steps, requests, info)
    records.steps.prefill_tokens[[0, 2]] = 10  # each request's first step prefilled
    return records


def test_step_walls_run_end_to_end_and_skip_idle_spells() -> None:
    walls = step_walls(_records())
    # Step 1 follows step 0 (request 0 still running): 0.022 − 0.010. Step 2 follows an idle
    # spell (request 0 done, request 1 not arrived): left out. Step 3: 0.525 − 0.510.
    np.testing.assert_allclose(walls.seconds, [0.012, 0.015])
    assert walls.with_prefill.tolist() == [False, False] and walls.steps == 4


CONFIG = {
    "name": "pair",
    "hardware": {"gpu": "cpu", "replicas": 1, "tensor_parallel": 1},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4.0}},
    "slo": {"ttft_ms": None, "tpot_ms": None, "e2e_ms": None},
}


@pytest.fixture
def pair_store(tmp_path: Path):
    with ResultsStore.open(tmp_path / "pair.duckdb") as store:
        real = make_meta("real1", backend="real", config=CONFIG)
        store.write_run(real, _records(1.0, {"device": "cpu"}))
        sim_config = CONFIG | {"cost_model": {"kind": "calibrated", "profile": "p1"}}
        sim = make_meta("sim1", backend="sim", config=sim_config)
        store.write_run(sim, _records(1.1, {"twin_of": "real1"}))
        yield store


def test_the_error_table_compares_like_with_like(pair_store: ResultsStore) -> None:
    real, sim = collect_run(pair_store, "real1"), collect_run(pair_store, "sim1")
    rows = {label: (r, s) for label, r, s, _ in error_rows(real, sim)}
    r, s = rows["TTFT median (ms)"]
    assert (r, s) == (real.summary["median_ttft_ms"], sim.summary["median_ttft_ms"])
    assert error(s, r) == pytest.approx(0.1)  # every time of the twin is 1.1× the real one's
    assert error(*reversed(rows["Step wall mean, all (ms)"])) == pytest.approx(0.1)
    assert rows["Steps"] == (4.0, 4.0)
    text = pair_error_text(pair_store, "real1", "sim1")
    assert "TTFT p99 (ms)" in text and "+10.0%" in text and "Step wall median" in text


def _drafting(records, draft_s: list[float]):
    """The records' decode steps (1 and 3) drafted 4 tokens each, in `draft_s` seconds."""
    steps = records.steps
    steps.drafted_tokens[[1, 3]] = 4
    steps.draft_s = np.array([0.0, draft_s[0], 0.0, draft_s[1]])
    return records


def test_a_drafting_pair_compares_its_draft_forwards(tmp_path: Path) -> None:
    with ResultsStore.open(tmp_path / "pair.duckdb") as store:
        store.write_run(make_meta("real", backend="real"), _drafting(_records(), [0.004, 0.006]))
        store.write_run(make_meta("sim", backend="sim"), _drafting(_records(), [0.006, 0.006]))
        real, sim = collect_run(store, "real"), collect_run(store, "sim")
    rows = {label: (r, s) for label, r, s, _ in error_rows(real, sim)}
    assert rows["Draft forwards per drafting step (ms)"] == pytest.approx((5.0, 6.0))
    assert rows["Draft forwards per drafted token (ms)"] == pytest.approx((1.25, 1.5))


def test_no_draft_rows_without_a_draft_model() -> None:
    """Lookahead drafts its candidates without a model; runs stored before schema 11 did
    not time their drafts: neither gets draft figures."""
    candidates = _drafting(_records(), [0.0, 0.0])
    unrecorded = _drafting(_records(), [float("nan"), float("nan")])
    assert step_walls(candidates).draft is None and step_walls(unrecorded).draft is None
    assert step_walls(_drafting(_records(), [0.002, 0.004])).draft == DraftTimes(0.003, 0.00075)


def test_served_points_are_the_target_s_share_of_a_drafting_step() -> None:
    """What a twin prices a real run's steps against leaves their draft forwards out."""
    from real_backend.calibration.probe_engine import StepShape, probe_points

    records = _drafting(_records(), [0.004, 0.006])
    shape = StepShape((), (), 1, 12, 12, 4, 58, None)
    points = probe_points("served", [shape] * 4, records.steps)
    ends = records.steps.start_s + records.steps.duration_s
    assert [p.forward_s for p in points] == pytest.approx([0.006, 0.010, 0.004])
    assert [p.step_s for p in points] == pytest.approx(np.diff(ends) - [0.004, 0.0, 0.006])


def test_the_report_shows_the_pair_with_its_errors_and_cdfs(
    pair_store: ResultsStore, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    build_report(pair_store, None, out)
    markdown = (out / "report.md").read_text()
    assert "Simulator vs real: " in markdown and "| E2E p90 (ms) |" in markdown
    assert (out / "twin_cdf_real1.png").is_file()
    assert "(uncalibrated)" not in markdown  # a calibrated twin is not flagged


def test_a_twin_that_cannot_price_the_real_steps_says_why(tmp_path: Path) -> None:
    """The step-price line comes after the real run is stored: a failure there is written
    into the line, never raised to leave the real run without its twin."""
    from workbench.runner import _step_prices
    from workbench.scenario.loader import load_scenario
    from workbench.store.profiles import ProfilePoint

    quickstart = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"
    sim = load_scenario(quickstart, ["cost_model={kind: calibrated, profile: absent}"])
    point = ProfilePoint(
        probe="served", step=1, prefill_chunk_tokens=(), prefill_context_tokens=(),
        decode_batch_size=1, decode_context_sum=10, decode_context_max=10,
        decode_extra_tokens=0, decode_extra_context_sum=0, forward_s=0.01, step_s=0.01,
        idle_before_s=0.0,
    )  # fmt: skip
    with ResultsStore.open(tmp_path / "empty.duckdb") as store:
        prices = _step_prices(sim, store, [point], [])
        assert _step_prices(sim, store, [], []) is None  # nothing measured, nothing to say
    assert prices is not None and prices.scale is None  # no speed-matched twin from it
    assert prices.text.startswith("not priced (WorkbenchError: ") and "absent" in prices.text


def test_a_draft_that_cannot_be_priced_says_why_beside_the_target_s_line(tmp_path: Path) -> None:
    from workbench.records import DraftForwards
    from workbench.runner import _draft_prices
    from workbench.scenario.loader import load_scenario

    speculative = Path(__file__).resolve().parent.parent / "scenarios" / "speculative_sim.yaml"
    sim = load_scenario(speculative, ["cost_model={kind: calibrated, profile: p}"])
    with ResultsStore.open(tmp_path / "empty.duckdb") as store:
        text, scale = _draft_prices(sim, store, [DraftForwards((((1, 9),),), 0.001)])
    assert scale is None  # no speed-matched draft from it
    assert text.startswith("the draft's forwards not priced (WorkbenchError: ")
    assert "draft_profile" in text


def test_a_speed_matched_twin_is_shown_beside_the_pair_never_as_the_twin(
    pair_store: ResultsStore,
) -> None:
    from reports.matching import simulator_twin, speed_matched_twin
    from reports.sim_vs_real import error_table

    cost = {"kind": "calibrated", "profile": "p1", "price_scale": 0.9091}
    matched = make_meta("fast1", backend="sim", config=CONFIG | {"cost_model": cost})
    pair_store.write_run(matched, _records(1.0, {"speed_matched_twin_of": "real1"}))
    alone = make_meta("real2", backend="real", config=CONFIG)  # a real run without a pair
    pair_store.write_run(alone, _records(1.0, {"device": "cpu"}))
    runs = [collect_run(pair_store, r) for r in ("real1", "sim1", "fast1", "real2")]
    real1, real2 = runs[0], runs[3]
    assert simulator_twin(real1, runs).run_id == "sim1"
    assert speed_matched_twin(real1, runs).run_id == "fast1"
    assert simulator_twin(real2, runs).run_id == "sim1"  # the plain twin of the same config
    table = error_table(real1, runs[1], runs[2])
    assert table.headers[-1] == "Error at the run's speed (fast1)"
    errors = {row[0]: row[-2:] for row in table.rows}
    assert errors["TTFT median (ms)"] == ["+10.0%", "+0.0%"]
    assert "every price × 0.9091" in table.note and "the draft's" not in table.note
    drafted = cost | {"draft_price_scale": 1.05}  # a drafting twin's draft, at its own speed
    meta = make_meta("fast2", backend="sim", config=CONFIG | {"cost_model": drafted})
    pair_store.write_run(meta, _records(1.0, {"speed_matched_twin_of": "real1"}))
    label = speed_matched_label(collect_run(pair_store, "fast2"))
    assert "every price × 0.9091 (the draft's × 1.0500, read from its own forwards)" in label
