"""PipeInfer scenarios end to end on the zoo `tiny` pair: the shipped sweep (PipeInfer two
ways, synchronous speculation, plain pipelining over 2 stage processes) serves every point with
coherent records and the pipeline metrics, and what the pipeline server does not run is
refused in one line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.invariants import violations
from workbench.metrics import summarize
from workbench.metrics.pipeline import PIPELINE_SUMMARY_COLUMNS
from workbench.runner import run_backend, with_model_source
from workbench.scenario.loader import load_scenario
from workbench.sweep import expand

pytest.importorskip("torch")

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "pipeinfer_real.yaml"


def shipped(tiny_zoo: Path, *overrides: str):
    return load_scenario(
        SCENARIO,
        overrides=[
            "model.zoo=tiny", f"model.zoo_dir={tiny_zoo}", "workload.num_requests=2",
            "workload.output_tokens.value=12", *overrides,
        ],
    )  # fmt: skip


def test_the_shipped_sweep_serves_every_policy(tiny_zoo: Path) -> None:
    points = expand(shipped(tiny_zoo), source=str(SCENARIO))
    kinds = [p.scenario.decoder.kind for p in points]
    assert kinds == ["pipeinfer", "pipeinfer", "pipeinfer", "pipeline"]
    outputs = []
    for point in points:
        records = run_backend(point.scenario, None)
        assert violations(records) == []
        summary = summarize(records)
        assert set(PIPELINE_SUMMARY_COLUMNS) <= set(summary)
        assert summary["pipeline_stages"] == 2 and summary["completed"] == 2
        assert records.info["pipeline_layers"] == "[[0, 1], [1, 2]]"
        outputs.append(summary["total_output_tokens"])
    assert outputs == [24] * 4


def test_pipeinfer_speculates_with_the_zoo_draft(tiny_zoo: Path) -> None:
    (point, *_) = expand(shipped(tiny_zoo, "decoder.p_accept=0.0", "sweep=null"), source="x")
    records = run_backend(point.scenario, None)
    summary = summarize(records)
    assert violations(records) == []
    assert summary["pipeline_runs_launched"] > summary["pipeline_runs_committed"]
    assert summary["acceptance_rate"] is not None  # drafted tokens were verified
    assert float(records.info["pipeline_draft_s"]) > 0


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (["hardware.gpu=a100-80gb"], "hardware.gpu", "CPU"),
        (["scheduler.max_batch_size=4"], "scheduler.max_batch_size", "one request at a time"),
        (["hardware.pipeline_parallel=3"], "hardware.pipeline_parallel", "stage needs one"),
        (["decoder.pipeline.layer_split=[1, 2, 3]"], "layer_split", "3 shares for 2"),
        (["decoder={kind: vanilla}"], "hardware.pipeline_parallel", "pipeinfer"),
    ],
)
def test_what_the_pipeline_does_not_run_is_refused(tiny_zoo, overrides, field, words) -> None:
    scenario = shipped(tiny_zoo, "sweep=null", *overrides)
    with pytest.raises(WorkbenchError, match=words) as caught:
        run_backend(with_model_source(scenario), None)
    assert caught.value.field is not None and field in caught.value.field


def test_layer_split_shares_must_be_positive(tiny_zoo: Path) -> None:
    with pytest.raises(WorkbenchError, match="positive"):
        shipped(tiny_zoo, "sweep=null", "decoder.pipeline.layer_split=[1, 0]")
