"""The feasibility check counts what a request really caches: prompt + output − 1 tokens
(the last emitted token is never written), plus a multi-token decoder's lookahead slots
(issue 21, bug 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.invariants import violations
from workbench.scenario.loader import validate_scenario
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import ContinuousBatchingConfig
from workbench.scheduling.factory import check_feasible


def _one_request(prompt: int, output: int, scheduler: dict) -> Scenario:
    return validate_scenario(
        {
            "name": "feasibility",
            "workload": {
                "num_requests": 1,
                "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                "prompt_tokens": {"kind": "fixed", "value": prompt},
                "output_tokens": {"kind": "fixed", "value": output},
            },
            "model": {"name": "llama-3-8b"},
            "hardware": {"gpu": "h100-sxm"},
            "cost_model": {"kind": "fixed_step", "step_ms": 10},
            "scheduler": {**scheduler, "kv_cache": {"block_size": 16, "num_blocks": 10}},
        },
        source="feasibility",
        base_dir=Path("."),
    )


@pytest.mark.parametrize(
    "scheduler",
    [{"kind": "continuous"}, {"kind": "static", "batch_size": 1}],
    ids=["continuous", "static"],
)
def test_a_request_filling_every_block_runs_to_its_end(scheduler: dict) -> None:
    records = simulate(_one_request(150, 11, scheduler))  # caches 160 tokens = 10 blocks
    assert list(records.requests.status) == ["finished"]
    assert records.requests.preemptions[0] == 0
    assert records.steps.kv_blocks_used.max() == 10
    assert violations(records, kv_blocks=10) == []


def test_one_token_more_is_refused() -> None:
    with pytest.raises(WorkbenchError, match="needs 11 KV blocks but a replica has 10"):
        simulate(_one_request(150, 12, {"kind": "continuous"}))


def _continuous(**fields: object) -> ContinuousBatchingConfig:
    return ContinuousBatchingConfig.model_validate({"kind": "continuous", **fields})


def test_lookahead_slots_come_on_top() -> None:
    cfg = _continuous()
    check_feasible(cfg, 10, 150, 161, source=None)
    with pytest.raises(WorkbenchError, match=r"\+1 lookahead slots"):
        check_feasible(cfg, 10, 150, 161, source=None, lookahead_slots=1)


def test_whole_prefills_must_fit_a_recompute_of_prompt_and_output_less_one() -> None:
    cfg = _continuous(max_batched_tokens=300, max_batch_size=8)
    check_feasible(cfg, 100, 200, 301, source=None)  # recomputes at most 300 tokens
    with pytest.raises(WorkbenchError, match="recomputes 301 in one step"):
        check_feasible(cfg, 100, 200, 302, source=None)
