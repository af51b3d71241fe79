"""The same stages under torchrun: rank 0 attaches the ranks torchrun started as its
pipeline (`real_backend.pipeline.torchrun_main.run_ranks`) and decodes losslessly."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from decoder_models import random_model
from pipeline_helpers import save_checkpoint

DRIVER = Path(__file__).parent / "pipeline_torchrun_driver.py"


@pytest.mark.slow
def test_stages_started_by_torchrun_decode_like_greedy(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this Python")
    layers, seed = 3, 6
    folder = save_checkpoint(random_model(64, layers=layers, seed=seed), tmp_path / "model")
    result = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "3", str(DRIVER), str(folder),
         str(layers), str(seed)],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "torchrun, 3 stages: equal to greedy" in result.stdout


def test_rank_zero_leaves_with_the_status_the_command_line_asked_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from real_backend.pipeline.torchrun_main import exit_code

    assert [exit_code(SystemExit(c)) for c in (None, 0, 2)] == [0, 0, 2]
    assert exit_code(SystemExit("scenario.yaml: workload.rate: expected a number")) == 1
    assert "workload.rate" in capsys.readouterr().err
