"""Calibrating the PipeInfer step model from a run log: the measured stage times, hops and
head time come back from a log of known timing, and a real tiny-model run is simulated
from its own log (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.pipeinfer.calibration import from_log
from simulator.pipeinfer.engine import PipelineSimulation, Policy
from simulator.pipeinfer.timing import Link, PipelineTiming, even_layers
from workbench.workload.requests import Workload


def _simulated_info(policy: Policy) -> dict[str, str]:
    timing = PipelineTiming(
        3, even_layers(12, 3),
        lambda stage, nodes, context: 0.004 * (stage + 1) + 0.001 * nodes,
        lambda context: 0.002, Link(0.0005, None), 4096, commit_s=0.0003,
    )  # fmt: skip
    workload = Workload(np.zeros(3), np.array([8, 16, 32]), np.full(3, 30))
    acceptance = AcceptanceDistribution.iid(0.6, 3)
    records = PipelineSimulation(timing, policy, acceptance, np.random.default_rng(1)).serve(
        workload
    )
    return records.info


def _known_pipeline_log(policy: Policy) -> tuple[dict, float]:
    info = _simulated_info(policy)
    return json.loads(info["pipeline_runs"]), float(info["pipeline_draft_s"])


@pytest.mark.parametrize(
    "policy",
    [Policy("pipeline", False, 0, 1), Policy("pipeinfer", False, 3, 1)],
    ids=["pipeline", "synchronous"],
)
def test_known_timing_comes_back(policy: Policy) -> None:
    log, draft_s = _known_pipeline_log(policy)
    calibration = from_log("x", log, draft_s)
    assert calibration.stage_fixed_s == pytest.approx([0.004, 0.008, 0.012], rel=1e-6)
    assert calibration.stage_per_node_s == pytest.approx([0.001] * 3, rel=1e-6)
    assert calibration.hop_s == pytest.approx(0.0005, rel=1e-6)  # 2 hops and the way back
    assert calibration.commit_s == pytest.approx(0.0003, rel=1e-6)
    if policy.draft_tokens:
        assert calibration.draft_token_s == pytest.approx(0.002, rel=1e-6)
        drafted, accepted = calibration.draft_outcomes.T
        assert (accepted <= drafted).all() and drafted.max() == 3


def test_the_empty_draft_share_counted_by_the_head_comes_back() -> None:
    info = _simulated_info(Policy("pipeinfer", True, 3, 4, empty_draft_share=0.4))
    log, empty = json.loads(info["pipeline_runs"]), int(info["pipeline_empty_drafts"])
    speculative = sum(kind == "speculative" for kind in log["kind"])
    assert empty > 0 and speculative > 0
    counted = from_log("x", log, float(info["pipeline_draft_s"]), empty)
    assert counted.empty_draft_share == pytest.approx(empty / (empty + speculative))
    assert counted.empty_draft_share == pytest.approx(0.4, abs=0.1)  # the drawn share
    # Without the count (runs stored before it), the estimate from runs per result.
    estimated = from_log("x", log, float(info["pipeline_draft_s"]))
    results = len(log["kind"])
    assert estimated.empty_draft_share == pytest.approx(results / (results + speculative))


@pytest.mark.slow
@pytest.mark.parametrize("index", [1, 2, 3], ids=["pipeinfer", "synchronous", "pipeline"])
def test_a_real_run_is_simulated_from_its_own_log(
    tiny_zoo: Path, tmp_path: Path, index: int
) -> None:
    pytest.importorskip("torch")
    from simulator.run import simulate
    from workbench.metrics import summarize
    from workbench.runner import run_scenario, with_model_source
    from workbench.scenario.loader import load_scenario
    from workbench.store.db import ResultsStore
    from workbench.sweep import expand

    path = Path(__file__).resolve().parent.parent / "scenarios" / "pipeinfer_real.yaml"
    overrides = [
        "model.zoo=tiny", f"model.zoo_dir={tiny_zoo}", "workload.num_requests=3",
        "workload.output_tokens.value=40",
    ]  # fmt: skip
    scenario = load_scenario(path, overrides)
    point = expand(scenario, source=str(path))[index].scenario
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        (outcome,) = run_scenario(point, store, source=str(path))
        calibrated = point.model_copy(
            update={
                "backend": "sim",
                "decoder": point.decoder.model_copy(update={"calibrate_from": outcome.run_id}),
            }
        )
        simulated = summarize(simulate(with_model_source(calibrated), store=store))
    real = outcome.summary["output_throughput"]
    # The issue asks 10 %. The simulator replays the log's own stage times, so a stall in the
    # real run is in its calibration too: +0.1 % in each of 12 runs (4 rounds, 3 policies).
    assert simulated["output_throughput"] == pytest.approx(real, rel=0.1)
