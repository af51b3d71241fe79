"""Early stopping of plan probes never changes a verdict: a probe is stopped only when its
failure is certain, and a run to the end fails too (issue 14)."""

from __future__ import annotations

import pytest
from scenario_helpers import quickstart

from simulator.run import simulate
from workbench.planning.monitor import SloMonitor, allowed_misses
from workbench.planning.slo import evaluate
from workbench.scenario.plan import PlanSLO

SLOS = {
    "ttft": PlanSLO(ttft={"percentile": 99, "max_ms": 1500}),
    "tpot": PlanSLO(tpot={"percentile": 90, "max_ms": 25}),
    "e2e + attainment": PlanSLO(e2e={"percentile": 50, "max_ms": 20000}, attainment=0.9),
}


def test_allowed_misses_is_the_percentiles_slack() -> None:
    assert allowed_misses(2000, 99) == 20  # the 21st request over the limit loses p99
    assert allowed_misses(100, 50) == 50
    assert allowed_misses(1, 99) == 0


@pytest.mark.parametrize("slo", SLOS.values(), ids=SLOS.keys())
@pytest.mark.parametrize("rate", [4, 10, 16, 24])
def test_a_stopped_probe_fails_when_run_to_its_end(slo: PlanSLO, rate: int) -> None:
    scenario = quickstart("workload.num_requests=400", f"workload.arrival.rate_per_s={rate}")
    full = evaluate(simulate(scenario), slo)
    watched = simulate(scenario, monitor=SloMonitor(slo, 400))
    stopped = watched.info.get("stopped_early")
    if stopped is not None:
        assert not full.passed, stopped
        assert not evaluate(watched, slo).passed
    else:  # not stopped: the same run, the same verdict
        assert evaluate(watched, slo) == full


def test_an_overloaded_probe_stops_well_before_its_end() -> None:
    slo = SLOS["ttft"]
    scenario = quickstart("workload.num_requests=1000", "workload.arrival.rate_per_s=60")
    records = simulate(scenario, monitor=SloMonitor(slo, 1000))
    assert "p99 TTFT lost" in records.info["stopped_early"]
    assert (records.requests.status == "finished").sum() < 500
