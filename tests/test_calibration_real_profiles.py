"""Calibration profiles in the results store: round trips (database, CSV), the schema 5
migration, the calibrated cost model in a simulation, and bad input refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from calibration_helpers import grid_works, points_of, profile, store_profile, tiny_config, truth

from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import calibrated_config_for, step_work
from simulator.cost_models.factory import build_cost_model
from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario, validate_scenario
from workbench.scenario.scenario import Scenario
from workbench.store import ResultsStore
from workbench.store.profiles import read_csv_profile
from workbench.store.schema import SCHEMA_VERSION


def _points() -> list:
    known = truth()
    works = grid_works()
    return points_of(works, [known.step_time_s(w) for w in works])


def _scenario(
    tmp_path: Path, cost: dict[str, Any], gpu: str = "cpu", dtype: str = "fp32"
) -> Scenario:
    folder = str(tiny_config(tmp_path / "m"))
    data = {
        "name": "calibrated",
        "seed": 3,
        "workload": {
            "num_requests": 12,
            "arrival": {"kind": "poisson", "rate_per_s": 50},
            "prompt_tokens": {"kind": "uniform", "low": 8, "high": 64},
            "output_tokens": {"kind": "uniform", "low": 4, "high": 24},
        },
        "model": {"name": "zoo-tiny", "config_path": folder, "dtype": dtype},
        "hardware": {"gpu": gpu},
        "scheduler": {"kind": "continuous", "max_batch_size": 8, "kv_cache": {"num_blocks": 200}},
        "cost_model": cost,
    }  # fmt: skip
    return validate_scenario(data, source="test.yaml", base_dir=tmp_path)


@pytest.fixture
def store(tmp_path: Path):
    with ResultsStore.open(tmp_path / "p.duckdb") as opened:
        yield opened


def test_points_and_conditions_round_trip_through_the_store_and_csv(store, tmp_path: Path) -> None:
    points = _points()
    stored = store_profile(store, profile(), points)
    assert stored.complete and stored.device == "cpu" and stored.threads == 2
    assert store.profile_points(stored.profile_id) == points
    assert store.find_profile("tiny-cpu-fp32") == stored
    assert store.find_profile(stored.profile_id[:6]) == stored
    csv = store.export_profile_csv(stored.profile_id, tmp_path / "p.csv")
    again, csv_points = read_csv_profile(csv)
    assert csv_points == points
    assert again.model_shape == stored.model_shape and again.versions == stored.versions
    assert (again.name, again.device, again.dtype, again.created_at) == (
        stored.name, stored.device, stored.dtype, stored.created_at,
    )  # fmt: skip


def test_the_latest_profile_of_a_name_is_the_one_used(store) -> None:
    older = store_profile(store, profile(), _points())
    newer = profile()
    newer.created_at += 60
    newer = store_profile(store, newer, _points())
    assert store.find_profile("tiny-cpu-fp32").profile_id == newer.profile_id != older.profile_id


def test_a_schema_4_database_is_read_as_it_is_and_migrated_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    ResultsStore.open(path).close()
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE profile_points")
    con.execute("DROP TABLE profiles")
    con.execute("UPDATE schema_version SET version = 4")
    con.close()
    with ResultsStore.open(path, read_only=True) as old:
        assert old.profiles() == [] and old.list_runs() == []
    with ResultsStore.open(path) as upgraded:
        store_profile(upgraded, profile(), _points()[:3])
        versions = upgraded.connection.execute("SELECT max(version) FROM schema_version").fetchall()
        assert versions[0][0] == SCHEMA_VERSION >= 5
        assert len(upgraded.profile_points(upgraded.profiles()[0].profile_id)) == 3


def test_a_simulation_prices_its_steps_with_the_profile(store, tmp_path: Path) -> None:
    store_profile(store, profile(), _points())
    scenario = _scenario(tmp_path, {"kind": "calibrated", "profile": "tiny-cpu-fp32"})
    records = simulate(scenario, store=store)
    model = build_cost_model(scenario, store)
    first = StepWork(
        prefill_chunk_tokens=(int(records.requests.prompt_tokens[0]),), prefill_context_tokens=(0,)
    )
    assert records.steps.duration_s[0] == model.step_time_s(first)
    known = truth()
    assert np.isclose(model.step_time_s(first), known.step_time_s(first), rtol=1e-9)
    assert (records.requests.status == "finished").all()


def test_an_exported_csv_prices_like_the_database(store, tmp_path: Path) -> None:
    stored = store_profile(store, profile(), _points())
    csv = store.export_profile_csv(stored.profile_id, tmp_path / "p.csv")
    from_db = build_cost_model(
        _scenario(tmp_path, {"kind": "calibrated", "profile": stored.name}), store
    )
    from_csv = build_cost_model(
        _scenario(tmp_path, {"kind": "calibrated", "profile_csv": str(csv)})
    )
    for point in _points():
        assert from_csv.step_time_s(step_work(point)) == from_db.step_time_s(step_work(point))


# ---------------------------------------------------------------- bad input, one line each


def _refusal(store, tmp_path: Path, cost: dict[str, Any], **scenario: str) -> str:
    with pytest.raises(WorkbenchError) as caught:
        build_cost_model(_scenario(tmp_path, cost, **scenario), store)
    line = caught.value.one_line()
    assert "\n" not in line
    return line


def test_a_profile_from_another_device_is_refused_unless_the_scenario_says_so(
    store, tmp_path: Path
) -> None:
    store_profile(store, profile(), _points())
    cost = {"kind": "calibrated", "profile": "tiny-cpu-fp32"}
    line = _refusal(store, tmp_path, cost, gpu="h100-sxm")
    assert "cost_model.profile" in line and "measured on cpu fp32" in line
    assert "cuda fp32" in line and "allow_other_device" in line
    assert "measured on cpu fp32" in _refusal(store, tmp_path, cost, dtype="bf16")
    allowed = _scenario(tmp_path, cost | {"allow_other_device": True}, gpu="h100-sxm")
    assert (
        build_cost_model(allowed, store).step_time_s(
            StepWork(decode_batch_size=1, decode_context_sum=9)
        )
        > 0
    )


def test_a_profile_of_another_model_is_refused(store, tmp_path: Path) -> None:
    other = profile()
    other.model_shape["num_layers"] = 4
    store_profile(store, other, _points())
    line = _refusal(
        store, tmp_path, {"kind": "calibrated", "profile": other.name, "allow_other_device": True}
    )
    assert "measured another model: num_layers 4 (scenario 2)" in line


def test_unknown_incomplete_or_unreachable_profiles_are_refused(store, tmp_path: Path) -> None:
    line = _refusal(store, tmp_path, {"kind": "calibrated", "profile": "nope"})
    assert "no calibration profile named 'nope'" in line and "workbench calibrate" in line
    unfinished = profile("half")
    store.add_profile(unfinished)
    store.write_probe(unfinished.profile_id, _points()[:5], last=False)
    assert "is incomplete" in _refusal(store, tmp_path, {"kind": "calibrated", "profile": "half"})
    with pytest.raises(WorkbenchError, match=r"cost_model\.profile: .*--db FILE"):
        build_cost_model(_scenario(tmp_path, {"kind": "calibrated", "profile": "half"}), None)
    with pytest.raises(WorkbenchError, match=r"cost_model\.profile_csv: file not found"):
        _scenario(tmp_path, {"kind": "calibrated", "profile_csv": "missing.csv"})
    with pytest.raises(WorkbenchError, match="exactly one of profile"):
        _scenario(tmp_path, {"kind": "calibrated"})


def test_pipeline_stages_are_refused_before_any_profile_is_looked_for(tmp_path: Path) -> None:
    calibrated = _scenario(tmp_path, {"kind": "calibrated", "profile": "p"})
    pipeinfer = load_scenario(
        Path(__file__).resolve().parent.parent / "scenarios" / "pipeinfer_sim.yaml",
        ["cost_model={kind: calibrated, profile: p}"],
    )
    assert pipeinfer.cost_model == calibrated.cost_model
    with pytest.raises(WorkbenchError, match=r"cost_model\.kind: .*not pipeline stages"):
        build_cost_model(pipeinfer, None)  # no store, no profile: the stages said first


def test_a_twin_without_a_matching_profile_names_the_command(store, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, {"kind": "roofline"})
    with pytest.raises(WorkbenchError) as caught:
        calibrated_config_for(scenario, store, None)
    assert "workbench calibrate --model" in caught.value.one_line()
    stored = store_profile(store, profile(), _points())
    assert calibrated_config_for(scenario, store, None).profile == stored.profile_id
