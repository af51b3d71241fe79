"""`workbench calibrate` then `workbench run scenarios/quickstart_real.yaml --backend both`:
the real run and its calibrated simulated twin stored as a pair, the error table printed
and in the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from workbench.cli import main
from workbench.store import ResultsStore
from workbench.store.profiles import Profile

pytestmark = pytest.mark.slow  # a calibration and a real run of the tiny model

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart_real.yaml"


def _run_both(db: Path, zoo: Path) -> list[str]:
    sets = ["--set", f"model.zoo_dir={zoo}", "--set", "workload.num_requests=10"]
    return ["run", str(SCENARIO), "--backend", "both", "--db", str(db), "--no-progress", *sets]


def _calibrate_then_run_both(db: Path, zoo: Path, capsys, *flags: str) -> str:
    """`workbench calibrate` (the test grid) then `run --backend both`: what the run printed."""
    calibrate = ["calibrate", "--model", "tiny", "--zoo-dir", str(zoo), "--grid", "test"]
    assert main([*calibrate, "--db", str(db), "--no-progress"]) == 0
    capsys.readouterr()
    assert main([*_run_both(db, zoo), *flags]) == 0
    return capsys.readouterr().out


def test_both_backends_run_as_a_pair_with_an_error_table(
    tiny_zoo: Path, tmp_path: Path, capsys
) -> None:
    db = tmp_path / "both.duckdb"
    out = _calibrate_then_run_both(db, tiny_zoo, capsys)
    assert "sim vs real" in out and "TTFT median (ms)" in out and "Step wall mean" in out
    with ResultsStore.open(db, read_only=True) as store:
        real, sim = store.list_runs()
        (profile,) = store.profiles()
    assert (real["backend"], sim["backend"]) == ("real", "sim")
    assert sim["info"]["twin_of"] == real["run_id"]
    # The profile's drift probes, served before and after the real run.
    drift = sim["info"]["machine_drift"]
    assert drift.count("before the run") == 2 and drift.count("after") == 2
    assert "decode-b4-p48" in drift and "mixed-b4" in drift
    assert "Machine drift since calibration" in out
    # The real run's own steps, each priced by the twin's model.
    prices = sim["info"]["step_prices"]
    assert re.search(r"(^|; )decode [+-]\d+\.\d% \(median \|error\| \d+\.\d%, \d+ steps\)", prices)
    assert "decode, batch 1 " in prices
    assert "own steps priced by the twin's cost model" in out
    real_config, sim_config = json.loads(real["config_json"]), json.loads(sim["config_json"])
    assert sim_config["cost_model"] == {
        "kind": "calibrated", "profile": profile.profile_id, "profile_csv": None,
        "allow_other_device": False, "price_scale": 1.0, "draft_profile": None,
        "draft_profile_csv": None, "draft_roofline": False, "draft_price_scale": None,
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


def test_a_twin_at_the_real_runs_speed_is_stored_beside_the_pair(
    tiny_zoo: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simulator.cost_models import calibrated

    measured: list[float] = []
    served_price_scale = calibrated.served_price_scale

    def recorded(*args: object) -> float:
        measured.append(served_price_scale(*args))
        return measured[-1]

    monkeypatch.setattr(calibrated, "served_price_scale", recorded)
    db = tmp_path / "matched.duckdb"
    out = _calibrate_then_run_both(db, tiny_zoo, capsys, "--speed-matched")
    assert "at the run's speed" in out and "every price ×" in out
    with ResultsStore.open(db, read_only=True) as store:
        real, sim, matched = store.list_runs()
    assert (
        matched["backend"] == "sim" and matched["info"]["speed_matched_twin_of"] == real["run_id"]
    )
    assert "twin_of" not in matched["info"]  # the pair's twin stays the plain one
    sim_cost = json.loads(sim["config_json"])["cost_model"]
    matched_cost = json.loads(matched["config_json"])["cost_model"]
    scale = matched_cost.pop("price_scale")
    assert sim_cost.pop("price_scale") == 1.0 and matched_cost == sim_cost
    assert scale > 0 and {round(m, 4) for m in measured} == {scale}  # the real run's speed
    out_dir = tmp_path / "report"
    assert main(["report", "--db", str(db), "--out", str(out_dir)]) == 0
    report = (out_dir / "report.md").read_text()
    assert f"Error at the run's speed ({matched['run_id']})" in report
    assert f"every price × {scale:.4f}" in report


def test_json_output_carries_each_pairs_error_table(tiny_zoo: Path, tmp_path: Path, capsys) -> None:
    """`--json`: a line per run, then the pair's errors (as the stored runs give them), the
    twin at the run's speed and the twin's diagnostics."""
    from reports.collect import collect_run
    from reports.sim_vs_real import error, error_rows

    db = tmp_path / "json.duckdb"
    out = _calibrate_then_run_both(db, tiny_zoo, capsys, "--speed-matched", "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [("pair" in line) for line in lines] == [False, False, False, True]
    pair = lines[-1]["pair"]
    assert (pair["real"], pair["sim"], pair["at_run_speed"]["sim"]) == tuple(
        line["run_id"] for line in lines[:3]
    )
    with ResultsStore.open(db, read_only=True) as store:
        real, sim = collect_run(store, pair["real"]), collect_run(store, pair["sim"])
        matched = collect_run(store, pair["at_run_speed"]["sim"])
    rows = error_rows(real, sim)
    assert list(pair["errors"]) == [label for label, *_ in rows]
    for label, rv, sv, _ in rows:
        assert pair["errors"][label] == {"real": rv, "sim": sv, "error": error(sv, rv)}
    median = pair["at_run_speed"]["errors"]["TPOT median (ms)"]
    assert median["sim"] == matched.summary["median_tpot_ms"]
    assert pair["at_run_speed"]["price_scale"] == matched.config["cost_model"]["price_scale"]
    assert set(pair["diagnostics"]) == {"machine_drift", "step_prices"}  # one pass: no spread
    assert pair["diagnostics"]["step_prices"] == sim.run["info"]["step_prices"]


def test_speed_matching_needs_both_backends(tmp_path: Path, capsys) -> None:
    args = ["run", str(SCENARIO), "--backend", "sim", "--speed-matched"]
    assert main([*args, "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--speed-matched" in err


def test_twin_draws_need_both_backends_and_one_draw_or_more(tmp_path: Path, capsys) -> None:
    db = ["--db", str(tmp_path / "x.duckdb")]
    for backend, draws, says in (("sim", "3", "--backend both"), ("both", "0", "1 or more")):
        args = ["run", str(SCENARIO), "--backend", backend, "--twin-draws", draws, *db]
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--twin-draws" in err and says in err


def test_without_a_profile_nothing_runs(tiny_zoo: Path, tmp_path: Path, capsys) -> None:
    db = tmp_path / "none.duckdb"
    assert main(_run_both(db, tiny_zoo)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "workbench calibrate --model tiny" in err
    assert not db.exists()  # the real run never started: the database it made is gone


def test_a_profile_measured_with_other_threads_is_refused(tiny_zoo: Path, tmp_path: Path) -> None:
    import torch
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from workbench.errors import WorkbenchError
    from workbench.runner import twin_scenarios
    from workbench.scenario.loader import load_scenario

    scenario = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}"])
    other = measured_here(profile())
    other.threads = torch.get_num_threads() + 1
    with ResultsStore.open(tmp_path / "t.duckdb") as store:
        works = grid_works()
        store_profile(store, other, points_of(works, [truth().step_time_s(w) for w in works]))
        with pytest.raises(WorkbenchError, match=r"measured with \d+ torch threads, this run has"):
            twin_scenarios(scenario, store, None)


def test_an_exported_profile_is_checked_as_a_stored_one(tiny_zoo: Path, tmp_path: Path) -> None:
    import torch
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from workbench.errors import WorkbenchError
    from workbench.runner import twin_scenarios
    from workbench.scenario.loader import load_scenario

    works = grid_works()
    points = points_of(works, [truth().step_time_s(w) for w in works])
    other, mine = measured_here(profile()), measured_here(profile())
    other.threads = torch.get_num_threads() + 1
    mine.info |= {"kernels": "grouped"}
    with ResultsStore.open(tmp_path / "c.duckdb") as store:
        csvs = [
            store.export_profile_csv(store_profile(store, p, points).profile_id, tmp_path / name)
            for p, name in ((other, "other.csv"), (mine, "mine.csv"))
        ]
        for csv, refused in zip(csvs, [True, False], strict=True):
            sets = [f"model.zoo_dir={tiny_zoo}", "cost_model.kind=calibrated"]
            scenario = load_scenario(SCENARIO, [*sets, f"cost_model.profile_csv={csv}"])
            if refused:
                with pytest.raises(WorkbenchError, match=r"measured with \d+ torch threads"):
                    twin_scenarios(scenario, store, None)
            else:
                real, _ = twin_scenarios(scenario, store, None)
                assert real.cost_model.profile_csv == csv


def test_a_profile_of_other_kernels_is_refused(tiny_zoo: Path, tmp_path: Path) -> None:
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from workbench.errors import WorkbenchError
    from workbench.runner import twin_scenarios
    from workbench.scenario.loader import load_scenario

    padded = measured_here(profile())
    padded.info |= {"kernels": "reference", "decode_attention": "padded"}
    with ResultsStore.open(tmp_path / "k.duckdb") as store:
        works = grid_works()
        store_profile(store, padded, points_of(works, [truth().step_time_s(w) for w in works]))
        scenario = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}"])
        with pytest.raises(WorkbenchError, match="reference kernels, this run uses the grouped"):
            twin_scenarios(scenario, store, None)
        same = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}", "model.kernels=reference"])
        real, _ = twin_scenarios(same, store, None)
        assert real.model.kernels == "reference"


def test_a_profile_of_other_linear_layers_is_refused(tiny_zoo: Path, tmp_path: Path) -> None:
    import torch
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from real_backend.model.inference_linear import PLAIN, PREPACKED, default_linear
    from workbench.errors import WorkbenchError
    from workbench.runner import twin_scenarios
    from workbench.scenario.loader import load_scenario

    here = default_linear(torch.float32, "cpu")
    other, same, unrecorded = (measured_here(profile()) for _ in range(3))
    other.info |= {"kernels": "grouped", "linear": PLAIN if here == PREPACKED else PREPACKED}
    same.info |= {"kernels": "grouped", "linear": here}
    unrecorded.info |= {"kernels": "grouped"}
    del unrecorded.info["linear"]  # calibrated before the linear layers were recorded
    assert unrecorded.linear == PREPACKED  # CPU fp32: the default of its day
    works = grid_works()
    points = points_of(works, [truth().step_time_s(w) for w in works])
    scenario = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}"])
    with ResultsStore.open(tmp_path / "l.duckdb") as store:
        ids = [store_profile(store, p, points).profile_id for p in (other, same, unrecorded)]
        for profile_id, ran in zip(ids, [other.linear, here, PREPACKED], strict=True):
            if ran == here:
                real, _ = twin_scenarios(scenario, store, profile_id)
                assert real.cost_model.profile == profile_id
            else:
                with pytest.raises(WorkbenchError, match=f"linear layers ran on {ran}, this"):
                    twin_scenarios(scenario, store, profile_id)


def measured_here(prof: Profile) -> Profile:
    """The profile as if measured on this machine by this code, with this process's threads."""
    import torch

    from real_backend.calibration.measure import device_name
    from real_backend.model.inference_linear import default_linear

    prof.threads, prof.device_name = torch.get_num_threads(), device_name("cpu")
    prof.info["linear"] = default_linear(torch.float32, "cpu")
    return prof


def test_a_profile_of_another_processor_is_refused(tiny_zoo: Path, tmp_path: Path) -> None:
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from workbench.errors import WorkbenchError
    from workbench.runner import twin_scenarios
    from workbench.scenario.loader import load_scenario

    other = measured_here(profile())
    other.device_name = "AMD EPYC 7B13 ×2"  # the kind (cpu), dtype and threads all match
    other.info |= {"kernels": "grouped"}
    works = grid_works()
    with ResultsStore.open(tmp_path / "d.duckdb") as store:
        stored = store_profile(
            store, other, points_of(works, [truth().step_time_s(w) for w in works])
        )
        scenario = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}"])
        with pytest.raises(WorkbenchError, match="measured on AMD EPYC 7B13 ×2, this run is on"):
            twin_scenarios(scenario, store, None)
        said_so = [
            "cost_model.kind=calibrated", f"cost_model.profile={stored.profile_id}",
            "cost_model.allow_other_device=true",
        ]  # fmt: skip
        allowed = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}", *said_so])
        twin_scenarios(allowed, store, None)  # said so: priced with it


def test_drift_text_compares_with_the_profile() -> None:
    from real_backend.calibration.drift import ProbeDrift, drift_text

    before = [ProbeDrift("decode-b8-p384", 10.0, 10.5), ProbeDrift("mixed-b16", 20.0, 19.0)]
    after = [ProbeDrift("decode-b8-p384", 10.0, 12.0)]
    assert drift_text(before, after) == (
        "decode-b8-p384 +5.0% before the run, +20.0% after; mixed-b16 -5.0% before the run"
    )
    assert drift_text("not measured (OSError: gone)", after) == "not measured (OSError: gone)"


def test_drift_is_not_measured_without_the_profiles_checkpoint_or_probes(tiny_zoo: Path) -> None:
    from calibration_helpers import profile

    from real_backend.calibration.drift import DriftProbe

    gone = profile()  # its checkpoint, /zoo/tiny/target, is not on this machine
    assert DriftProbe.of(gone, []) is None
    here = profile()
    here.checkpoint = str(tiny_zoo / "tiny" / "target")
    assert DriftProbe.of(here, []) is None  # no points of the drift probes to compare with
    assert here.kernels == "reference"  # recorded before kernels were: that day's CPU set


def test_drift_is_read_against_the_profiles_median_pass(tiny_zoo: Path) -> None:
    """Three passes of each drift probe, the first in a slow spell: the reference is the
    middle pass's median step, not the first pass's."""
    from calibration_helpers import profile

    from real_backend.calibration.drift import DRIFT_PROBES, DriftProbe, median_pass_ms
    from workbench.store.profiles import ProfilePoint

    def steps(probe: str, ms: list[float]) -> list[ProfilePoint]:
        return [
            ProfilePoint(probe, i + 1, (), (), 4, 400, 0, 0, 0.9e-3 * t, 1e-3 * t)
            for i, t in enumerate(ms)
        ]

    here = profile()
    here.checkpoint = str(tiny_zoo / "tiny" / "target")
    points = []
    for name in DRIFT_PROBES["test"]:
        points += steps(f"{name}@1", [5.6, 5.7, 5.8]) + steps(f"{name}@2", [3.0, 3.1, 3.2])
        points += steps(f"{name}@3", [3.2, 3.3, 3.4])
    drift = DriftProbe.of(here, points)
    assert drift is not None
    assert drift.profile_ms == pytest.approx(dict.fromkeys(DRIFT_PROBES["test"], 3.3))
    assert median_pass_ms(points, "decode-b4-p48") == pytest.approx(3.3)
    assert median_pass_ms(points, "decode-b4") is None  # a probe name, not a prefix


def test_the_twin_prefers_a_profile_of_the_runs_kernels(tiny_zoo: Path, tmp_path: Path) -> None:
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from simulator.cost_models.calibrated import calibrated_config_for
    from workbench.runner import with_model_source
    from workbench.scenario.loader import load_scenario

    works = grid_works()
    points = points_of(works, [truth().step_time_s(w) for w in works])
    grouped, padded, plain = profile(), profile(), profile()
    grouped.info |= {"kernels": "grouped"}
    padded.info |= {"kernels": "reference"}
    plain.info |= {"kernels": "grouped", "linear": "aten"}
    plain.created_at = grouped.created_at + 60  # the latest (profiles list oldest first)
    scenario = with_model_source(load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}"]))
    with ResultsStore.open(tmp_path / "p.duckdb") as store:
        first = store_profile(store, grouped, points)  # linear: the prepacked weights of its day
        store_profile(store, padded, points)  # the latest, but of other kernels
        cost = calibrated_config_for(scenario, store, None, "grouped")
        assert cost.profile == first.profile_id
        latest = store_profile(store, plain, points)
        assert calibrated_config_for(scenario, store, None, "grouped").profile == latest.profile_id
        for linear, chosen in (("onednn-prepacked", first), ("aten", latest)):
            cost = calibrated_config_for(scenario, store, None, "grouped", None, linear)
            assert cost.profile == chosen.profile_id


def test_the_twin_prefers_a_profile_of_this_machine(tiny_zoo: Path, tmp_path: Path) -> None:
    from calibration_helpers import grid_works, points_of, profile, store_profile, truth

    from simulator.cost_models.calibrated import calibrated_config_for
    from workbench.runner import twin_scenarios, with_model_source
    from workbench.scenario.loader import load_scenario

    works = grid_works()
    points = points_of(works, [truth().step_time_s(w) for w in works])
    mine, other = measured_here(profile()), measured_here(profile())
    other.device_name = "NVIDIA H100 80GB HBM3"  # the latest, but of another device
    other.created_at = mine.created_at + 60  # (profiles list oldest first; ties in any order)
    for p in (mine, other):
        p.info |= {"kernels": "grouped"}
    scenario = load_scenario(SCENARIO, [f"model.zoo_dir={tiny_zoo}"])
    with ResultsStore.open(tmp_path / "m.duckdb") as store:
        first = store_profile(store, mine, points)
        store_profile(store, other, points)
        machine = (mine.device_name, mine.threads)
        chosen = calibrated_config_for(with_model_source(scenario), store, None, "grouped", machine)
        assert chosen.profile == first.profile_id
        assert calibrated_config_for(
            with_model_source(scenario), store, None, "grouped"
        ).profile != (first.profile_id)  # without the machine: the latest
        real, _ = twin_scenarios(scenario, store, None)  # so the twin runs, not refused
        assert real.cost_model.profile == first.profile_id


def test_a_speculative_twin_prices_its_draft_by_the_draft_s_profile(
    tiny_zoo: Path, tmp_path: Path
) -> None:
    from calibration_helpers import (
        TINY_DRAFT_SHAPE,
        grid_works,
        points_of,
        profile,
        store_profile,
        truth,
    )

    from reports.sim_vs_real import DRAW_SPREAD_LABEL, pair_error_text
    from workbench.errors import WorkbenchError
    from workbench.runner import run_twins, twin_scenarios
    from workbench.scenario.loader import load_scenario

    works = grid_works()
    points = points_of(works, [truth().step_time_s(w) for w in works])
    target = measured_here(profile())
    elsewhere, here = (measured_here(profile("d", shape=TINY_DRAFT_SHAPE)) for _ in range(2))
    elsewhere.device_name = "AMD EPYC 7B13 ×2"
    for p in (target, elsewhere, here):
        p.info |= {"kernels": "grouped"}
    speculative = SCENARIO.parent / "speculative_real.yaml"
    scenario = load_scenario(speculative, [f"model.zoo_dir={tiny_zoo}"])
    with ResultsStore.open(tmp_path / "s.duckdb") as store:
        store_profile(store, target, points)
        with pytest.raises(WorkbenchError, match=r"draft_profile: no complete .* --model \S+draft"):
            twin_scenarios(scenario, store, None)
        store_profile(store, elsewhere, points)
        with pytest.raises(WorkbenchError, match=r"draft_profile: the draft's calibration profile"):
            twin_scenarios(scenario, store, None)
        mine = store_profile(store, here, points)
        real, twin = twin_scenarios(scenario, store, None)
        assert twin.cost_model.draft_profile == real.cost_model.draft_profile == mine.profile_id
        # Served, the twin prices the target's share of each step and the draft's forwards
        # apart, and a speed-matched twin follows (the scale read from the target's share).
        few = scenario.model_copy(
            update={"workload": scenario.workload.model_copy(update={"num_requests": 6})}
        )
        (pair,) = run_twins(few, store, source=__file__, speed_matched=True, twin_draws=3)
        spread = store.get_run(pair.sim.run_id)["info"]["draw_spread"]  # its own sampling
        assert spread.startswith("3 draws: TTFT p50 ±") and "E2E p99 ±" in spread
        table = pair_error_text(store, pair.real.run_id, pair.sim.run_id)
        assert f"{DRAW_SPREAD_LABEL}: {spread}" in table
        prices = store.get_run(pair.sim.run_id)["info"]["step_prices"]
        assert "the target's share" in prices and "the draft's forwards" in prices
        assert pair.speed_matched is not None
        # ... and its draft at the speed of its own measured forwards, read apart.
        cost = json.loads(store.get_run(pair.speed_matched.run_id)["config_json"])["cost_model"]
        assert cost["draft_price_scale"] > 0 and cost["draft_price_scale"] != cost["price_scale"]
