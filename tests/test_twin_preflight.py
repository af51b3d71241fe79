"""`run --backend both` over a sweep: a later pair's refusal comes before the first real run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import workbench.runner as runner
from workbench.errors import WorkbenchError
from workbench.scenario.loader import validate_scenario
from workbench.store import ResultsStore

SWEEP = {
    "name": "twins",
    "workload": {
        "num_requests": 10,
        "arrival": {"kind": "poisson", "rate_per_s": 4.0},
        "prompt_tokens": {"kind": "fixed", "value": 16},
        "output_tokens": {"kind": "fixed", "value": 8},
    },
    "model": {"name": "llama-3-8b"},
    "hardware": {"gpu": "h100-sxm"},
    "scheduler": {"kind": "continuous", "max_batch_size": 8},
    "sweep": {"grid": {"workload.arrival.rate_per_s": [4, 8]}},
}


def test_a_later_pair_is_refused_before_the_first_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def twins(scenario: Any, store: Any, profile: Any) -> tuple[Any, Any]:
        if scenario.workload.arrival.rate_per_s == 8:
            raise WorkbenchError("no calibration profile", field="cost_model")
        return scenario, scenario  # checked as simulated scenarios: they pass

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a pair ran before every pair was checked")

    monkeypatch.setattr(runner, "twin_scenarios", twins)
    monkeypatch.setattr(runner, "run_point", never)
    scenario = validate_scenario(SWEEP, source="twins.yaml", base_dir=Path("."))
    with ResultsStore.open(":memory:") as store, pytest.raises(WorkbenchError) as caught:
        runner.run_twins(scenario, store, source="twins.yaml")
    line = caught.value.one_line()
    assert "rate_per_s': 8" in line and "cost_model: no calibration profile" in line
