"""`simulator.twin_draws`: a simulated run drawn again over the same requests."""

from __future__ import annotations

import numpy as np
from scenario_helpers import SCENARIOS

from simulator.run import simulate
from simulator.twin_draws import latency_quantiles, redrawn, spread_text
from workbench.scenario.loader import load_scenario

SMALL = ["workload.num_requests=40", "workload.arrival={kind: poisson, rate_per_s: 4.0}"]


def test_the_first_draw_is_the_run_s_own_and_others_differ() -> None:
    scenario = load_scenario(SCENARIOS / "lookahead_sim.yaml", SMALL)  # seed 11
    values = redrawn(scenario, None, [11, 12, 13])
    own = latency_quantiles(simulate(scenario))
    assert {name: v[0] for name, v in values.items()} == own
    assert all(len(v) == 3 for v in values.values())
    assert values["TPOT p50"][1] != values["TPOT p50"][0]
    text = spread_text(values)
    assert text.startswith("3 draws: TTFT p50 ±") and "TPOT p99 ±" in text
    assert "±0.0 %" not in text.split("TPOT p50")[1].split(",")[0]


def test_a_run_without_draws_spreads_by_nothing() -> None:
    scenario = load_scenario(SCENARIOS / "quickstart.yaml", ["workload.num_requests=40"])
    values = redrawn(scenario, None, [1, 2])
    assert all(np.all(v == v[0]) for v in values.values())
    assert set(spread_text(values).removeprefix("2 draws: ").split(", ")) == {
        f"{name} ±0.0 %" for name in values
    }
