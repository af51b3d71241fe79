"""Pipeline parallelism in the simulator (vLLM's virtual engines through shared stages):
stepped by hand on a fixed-step cost model, KV split per engine, routing inside a replica,
and the invariants on a loaded run (issue 13)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scenario_helpers import quickstart

from simulator.pipeline import StageLink, StagePipeline
from simulator.run import simulate
from workbench.invariants import violations
from workbench.scenario.loader import validate_scenario


def _two_requests(stages: int, link: dict) -> dict:
    return {
        "name": "pp-by-hand",
        "workload": {
            "num_requests": 2,
            "arrival": {"kind": "batch"},
            "prompt_tokens": {"kind": "fixed", "value": 4},
            "output_tokens": {"kind": "fixed", "value": 3},
        },
        "model": {"name": "llama-3-8b"},
        "hardware": {"gpu": "h100-sxm", "pipeline_parallel": stages, "stage_link": link},
        "cost_model": {"kind": "fixed_step", "step_ms": 10},
        "scheduler": {"kind": "continuous", "kv_cache": {"num_blocks": 64}},
    }


def test_two_engines_interleave_through_two_stages_as_by_hand() -> None:
    data = _two_requests(2, {"latency_us": 0, "bandwidth_gb_s": 1e9})  # a free hop
    records = simulate(validate_scenario(data, source="test", base_dir=Path(".")))
    # Each 10 ms step takes 5 ms per stage. Engine 0 (request 0) enters at 0: stages
    # 0-5, 5-10. Engine 1 (request 1) waits for stage 0: 5-10, 10-15. Then each engine's
    # next step enters when its last one left: 10 -> 20, 15 -> 25, 20 -> 30, 25 -> 35.
    assert list(records.requests.replica) == [0, 1]  # one request per engine
    assert records.requests.first_token_s.tolist() == pytest.approx([0.010, 0.015])
    assert records.requests.finish_s.tolist() == pytest.approx([0.030, 0.035])
    steps = records.steps
    ends = steps.start_s + steps.duration_s
    assert ends[steps.replica == 0].tolist() == pytest.approx([0.010, 0.020, 0.030])
    assert ends[steps.replica == 1].tolist() == pytest.approx([0.015, 0.025, 0.035])


def test_the_hop_delays_every_stage_after_the_first() -> None:
    pipeline = StagePipeline(3, StageLink(latency_s=0.001, bandwidth_bytes_s=1e6), 100)
    # 30 ms of compute over 3 stages; each hop: 1 ms + 10 tokens · 100 B / 1 MB/s = 2 ms.
    assert pipeline.run(0.0, 0.030, 10) == pytest.approx(0.034)
    assert pipeline.free_s == pytest.approx([0.010, 0.022, 0.034])
    assert pipeline.run(0.0, 0.030, 10) == pytest.approx(0.044)  # waits for each stage


def test_each_engine_gets_its_share_of_the_blocks() -> None:
    one = simulate(quickstart("workload.num_requests=50"))
    two = simulate(quickstart("workload.num_requests=50", "hardware.pipeline_parallel=2"))
    assert two.info["pipeline_parallel"] == "2"
    per_engine = int(two.info["kv_blocks_per_engine"])
    assert per_engine == int(two.info["kv_blocks_per_replica"]) // 2
    assert per_engine > int(one.info["kv_blocks_per_replica"]) // 2  # weights over 2× GPUs


@pytest.mark.parametrize("stages", [2, 4])
def test_a_loaded_pipelined_run_keeps_the_invariants(stages: int) -> None:
    scenario = quickstart(
        "workload.num_requests=300",
        "workload.arrival.rate_per_s=20",
        f"hardware.pipeline_parallel={stages}",
        "hardware.replicas=2",
        "routing.kind=least_outstanding",
    )
    records = simulate(scenario)
    per_engine = int(records.info["kv_blocks_per_engine"])
    assert violations(records, per_engine) == []
    engines = np.unique(records.requests.replica)
    assert len(engines) == 2 * stages  # every virtual engine of both replicas served
