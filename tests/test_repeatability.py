"""The calibrated machine against itself: a probe served in several passes runs the same
steps, and how far the passes' totals stray from each other is noise that any one real run
a twin is checked against carries too."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from calibration_helpers import grid_works, points_of, profile, store_profile

from reports.sim_vs_real import REPEATABILITY_LABEL, _drift_lines
from workbench.store import ResultsStore
from workbench.store.profiles import ProfilePoint
from workbench.store.repeatability import pass_spread

WORKS = grid_works()[:12]
QUICKSTART = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"


def passes(name: str, scales: tuple[float, ...]) -> list[ProfilePoint]:
    """The probe `name` served once per scale, each pass's steps that much slower."""
    points = []
    for number, scale in enumerate(scales, start=1):
        seconds = [scale * 1e-3 * (1 + i % 3) for i in range(len(WORKS))]
        points += points_of(WORKS, seconds, probe=f"{name}@{number}")
    return points


def test_the_spread_is_each_passs_distance_from_its_median_pass_weighted_by_time() -> None:
    spread = pass_spread(passes("a", (1.0, 1.1, 0.9)) + passes("b", (1.0, 1.0, 1.4, 1.2)))
    assert spread is not None and (spread.probes, spread.passes) == (2, 7)
    # a: 0, 0.1, 0.1 at weight 1 each; b (median 1.1): 1/11, 1/11, 3/11, 1/11 at weight 1.1
    assert spread.mean == pytest.approx((0.2 + 1.1 * 6 / 11) / (3 + 4 * 1.1))
    assert spread.p90 == pytest.approx(3 / 11)  # the passes at or below 0.1 weigh 85 %
    assert "by 10.8 %" in spread.describe() and "7 passes of 2 probes" in spread.describe()


def test_only_probes_that_ran_the_same_steps_in_three_passes_count() -> None:
    two = passes("two", (1.0, 2.0))
    other = passes("other", (1.0, 1.0, 3.0))  # its last pass ran other steps
    last = [p for p in other if p.probe == "other@3"]
    other = [p for p in other if p not in last] + [
        dataclasses.replace(p, decode_batch_size=p.decode_batch_size + 1) for p in last
    ]
    assert pass_spread(two + other) is None
    kept = pass_spread(two + other + passes("same", (1.0, 1.0, 1.5)))
    assert kept is not None and kept.probes == 1 and kept.mean == pytest.approx(0.5 / 3)


def test_a_twin_names_its_calibrations_spread(tmp_path) -> None:
    from workbench.runner import _calibration_repeatability
    from workbench.scenario.loader import load_scenario
    from workbench.scenario.system import CalibratedCostConfig

    with ResultsStore.open(tmp_path / "p.duckdb") as store:
        prof = store_profile(store, profile(), passes("a", (1.0, 1.1, 0.9)))
        scenario = load_scenario(QUICKSTART)
        cost = CalibratedCostConfig(kind="calibrated", profile=prof.profile_id)
        text = _calibration_repeatability(scenario.model_copy(update={"cost_model": cost}), store)
    assert text is not None and "by 6.7 %" in text


def test_the_pairs_table_prints_it_first() -> None:
    run = SimpleNamespace(run={"info": {"calibration_repeatability": "x", "step_prices": "y"}})
    lines = _drift_lines(run)  # type: ignore[arg-type]
    assert lines[0] == f"{REPEATABILITY_LABEL}: x" and len(lines) == 2


def test_calibrate_prints_it_where_probes_repeat(capsys) -> None:
    from workbench.cli import _print_repeatability

    _print_repeatability(passes("a", (1.0, 1.1, 0.9)))
    _print_repeatability(passes("b", (1.0,)))  # one pass (the test grid's): nothing to say
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "the machine repeating itself" in out[0] and "6.7 %" in out[0]
