"""`scenarios/quickstart_real.yaml` end to end: real backend, simulator, report side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from real_backend.model.inference_linear import prepack_pays
from workbench.cli import main
from workbench.store.db import ResultsStore

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart_real.yaml"


@pytest.fixture(scope="module")
def zoo_dir(tiny_zoo: Path) -> Path:
    return tiny_zoo  # built once per session (conftest.py)


def test_real_and_sim_runs_and_a_side_by_side_report(zoo_dir: Path, tmp_path: Path) -> None:
    db, out = tmp_path / "r.duckdb", tmp_path / "report"
    zoo = f"model.zoo_dir={zoo_dir}"
    assert main(["run", str(SCENARIO), "--db", str(db), "--set", zoo, "--no-progress"]) == 0
    assert main(["run", str(SCENARIO), "--backend", "sim", "--db", str(db), "--set", zoo]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        runs = store.list_runs()
        assert sorted(r["backend"] for r in runs) == ["real", "sim"]
        real = next(r for r in runs if r["backend"] == "real")
        records = store.load_records(real["run_id"])
    assert (records.requests.status == "finished").all()
    assert records.info["device"] == "cpu" and records.info["kernels"] == "grouped"
    packed = prepack_pays(torch.float32, "cpu")  # oneDNN's, but for MKL on an Intel CPU
    assert records.info["linear"] == ("onednn-prepacked" if packed else "aten")
    assert records.requests.output_tokens.sum() == records.steps.emitted_tokens.sum()
    assert main(["report", "--db", str(db), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert all(r["run_id"] in report for r in runs)


def test_unbuilt_zoo_model_names_the_command(tmp_path: Path, capsys) -> None:
    empty = f"model.zoo_dir={tmp_path / 'nothing'}"
    code = main(["run", str(SCENARIO), "--db", str(tmp_path / "r.duckdb"), "--set", empty])
    err = capsys.readouterr().err
    assert code == 2
    assert "workbench zoo build tiny" in err and "model.zoo" in err
    assert (
        not (tmp_path / "r.duckdb").exists()
        or not ResultsStore.open(tmp_path / "r.duckdb", read_only=True).list_runs()
    )


def test_gpu_scenario_without_cuda_is_refused_not_run_on_cpu(
    zoo_dir: Path, tmp_path: Path, capsys
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    args = ["--set", f"model.zoo_dir={zoo_dir}", "--set", "hardware.gpu=h100-sxm"]
    code = main(["run", str(SCENARIO), "--db", str(tmp_path / "r.duckdb"), *args])
    assert code == 2 and "no CUDA device" in capsys.readouterr().err
