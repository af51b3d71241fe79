"""The real sequence-scheduling scenarios run as shipped (fewer requests) on the zoo `tiny`
with its learned predictor: every request completes, the paper's metrics are there, and
each request answers the same whatever the schedule (FCR restarts included)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from decoder_models import one_thread  # noqa: E402

from workbench.cli import main  # noqa: E402
from workbench.metrics.batch import BATCH_METRICS  # noqa: E402

one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)

SEQSCHED = Path(__file__).resolve().parent.parent / "scenarios" / "seqsched"


def run_json(name: str, db: Path, zoo: Path, *overrides: str) -> list[dict]:
    sets = [f"model.zoo_dir={zoo}", "workload.num_requests=40", *overrides]
    args = ["run", str(SEQSCHED / name), "--db", str(db), "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*args, *(x for s in sets for x in ("--set", s))]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_vanilla_vbs_fcr_learned_and_constant_on_the_real_backend(
    tiny_predictor: Path, tiny_zoo: Path, tmp_path: Path
) -> None:
    vanilla, learned, constant = run_json("real_vbs_fcr.yaml", tmp_path / "r.duckdb", tiny_zoo)
    for summary in (vanilla, learned, constant):
        assert summary["completed"] == summary["num_requests"] == 40
        assert all(summary[key] is not None for key in BATCH_METRICS)
        # Answers do not depend on the schedule: per-request sampling streams, restarted
        # from the start after an FCR failure.
        assert summary["total_output_tokens"] == vanilla["total_output_tokens"]
    assert vanilla["fcr_ratio"] == 0 and vanilla["avg_batch_length"] > 0
    # The predictor was trained with a 64-token limit: VBS caps at its buckets, and the
    # responses that run longer fail once, and count as waste.
    assert learned["fcr_ratio"] > 0
    assert learned["effective_token_ratio"] < learned["effective_token_ratio_paper"]


def test_length_aware_admission_on_the_real_backend(
    tiny_predictor: Path, tiny_zoo: Path, tmp_path: Path
) -> None:
    runs = run_json("real_length_aware.yaml", tmp_path / "a.duckdb", tiny_zoo)
    assert len(runs) == 3  # FCFS, shortest predicted, with aging
    for summary in runs:
        assert summary["completed"] == 40
        assert summary["total_output_tokens"] == runs[0]["total_output_tokens"]


def test_the_learned_predictor_runs_on_the_simulator_too(
    tiny_predictor: Path, tiny_zoo: Path, tmp_path: Path
) -> None:
    """The simulator reads the same prompt ids; its lengths are the drawn ones (256 here)."""
    runs = run_json("real_vbs_fcr.yaml", tmp_path / "s.duckdb", tiny_zoo, "backend=sim")
    assert [r["completed"] for r in runs] == [40, 40, 40]
    assert runs[1]["fcr_ratio"] == 1.0  # every 256-token answer outruns a 64-token predictor
