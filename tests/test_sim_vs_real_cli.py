"""`workbench calibrate` then `workbench run scenarios/quickstart_real.yaml --backend both`:
the real run and its calibrated simulated twin stored as a pair, the error table printed
and in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from workbench.cli import main
from workbench.store import ResultsStore

pytestmark = pytest.mark.slow  # a calibration and a real run of the tiny model

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart_real.yaml"


def _run_both(db: Path, zoo: Path) -> list[str]:
    sets = ["--set", f"model.zoo_dir={zoo}", "--set", "workload.num_requests=10"]
    return ["run", str(SCENARIO), "--backend", "both", "--db", str(db), "--no-progress", *sets]


def test_both_backends_run_as_a_pair_with_an_error_table(
    tiny_zoo: Path, tmp_path: Path, capsys
) -> None:
    db = tmp_path / "both.duckdb"
    calibrate = ["calibrate", "--model", "tiny", "--zoo-dir", str(tiny_zoo), "--grid", "test"]
    assert main([*calibrate, "--db", str(db), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(_run_both(db, tiny_zoo)) == 0
    out = capsys.readouterr().out
    assert "sim vs real" in out and "TTFT median (ms)" in out and "Step wall mean" in out
    with ResultsStore.open(db, read_only=True) as store:
        real, sim = store.list_runs()
        (profile,) = store.profiles()
    assert (real["backend"], sim["backend"]) == ("real", "sim")
    assert sim["info"]["twin_of"] == real["run_id"]
    real_config, sim_config = json.loads(real["config_json"]), json.loads(sim["config_json"])
    assert sim_config["cost_model"] == {
        "kind": "calibrated", "profile": profile.profile_id, "profile_csv": None,
        "allow_other_device": False,
    }  # fmt: skip
    # The same KV budget on both: the real backend's own sizing, made explicit.
    blocks = real_config["scheduler"]["kv_cache"]["num_blocks"]
    assert blocks == sim_config["scheduler"]["kv_cache"]["num_blocks"]
    assert str(blocks) == real["info"]["kv_blocks_per_replica"]
    assert real_config["model"] == sim_config["model"] and "zoo_dir" in real_config["model"]
    assert real_config["cost_model"] == sim_config["cost_model"]  # they differ in backend alone
    out_dir = tmp_path / "report"
    assert main(["report", "--db", str(db), "--out", str(out_dir)]) == 0
    report = (out_dir / "report.md").read_text()
    assert "Simulator vs real: " in report and f"Sim ({sim['run_id']})" in report
    assert (out_dir / f"twin_cdf_{real['run_id']}.png").is_file()


def test_without_a_profile_nothing_runs(tiny_zoo: Path, tmp_path: Path, capsys) -> None:
    db = tmp_path / "none.duckdb"
    assert main(_run_both(db, tiny_zoo)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "workbench calibrate --model tiny" in err
    with ResultsStore.open(db, read_only=True) as store:
        assert store.list_runs() == []  # the real run never started


def test_a_profile_measured_with_other_threads_is_refused(tiny_zoo: Path, tmp_path: Path) -> None:
    import torch
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from workbench.errors import WorkbenchError
    from workbench.runner import twin_scenarios
    from workbench.scenario.loader import load_scenario

    scenario = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}"])
    other = profile()
    other.threads = torch.get_num_threads() + 1
    with ResultsStore.open(tmp_path / "t.duckdb") as store:
        works = grid_works()
        store_profile(store, other, points_of(works, [truth().step_time_s(w) for w in works]))
        with pytest.raises(WorkbenchError, match=r"measured with \d+ torch threads, this run has"):
            twin_scenarios(scenario, store, None)
