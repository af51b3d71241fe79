"""`simulator.draw_seed`: the simulator's own draws again, over the same request stream."""

from __future__ import annotations

import numpy as np
from scenario_helpers import SCENARIOS

from simulator.run import simulate
from workbench.records import RunRecords
from workbench.scenario.loader import load_scenario

SMALL = ["workload.num_requests=40", "workload.arrival={kind: poisson, rate_per_s: 4.0}"]


def run(name: str, *overrides: str, small: bool = True) -> RunRecords:
    return simulate(load_scenario(SCENARIOS / name, [*(SMALL if small else []), *overrides]))


def same_requests(
    a: RunRecords,
    b: RunRecords,
    fields: tuple[str, ...] = ("arrival_s", "prompt_tokens", "output_tokens"),
) -> bool:
    return all(np.array_equal(getattr(a.requests, f), getattr(b.requests, f)) for f in fields)


def test_the_scenario_s_seed_is_the_default_draw_seed() -> None:
    default = run("lookahead_sim.yaml")
    explicit = run("lookahead_sim.yaml", "simulator.draw_seed=11")  # the scenario's seed
    assert np.array_equal(default.steps.emitted_tokens, explicit.steps.emitted_tokens)
    assert np.array_equal(default.requests.finish_s, explicit.requests.finish_s)


def test_another_draw_seed_redraws_acceptance_over_the_same_requests() -> None:
    first = run("lookahead_sim.yaml")
    again = run("lookahead_sim.yaml", "simulator.draw_seed=12")
    assert same_requests(first, again)
    assert not np.array_equal(first.requests.finish_s, again.requests.finish_s)
    assert first.steps.emitted_tokens.sum() == again.steps.emitted_tokens.sum()  # same outputs


def test_another_draw_seed_redraws_apar_trees_over_the_same_requests() -> None:
    first = run("apar_sim.yaml")
    again = run("apar_sim.yaml", "simulator.draw_seed=5")
    assert same_requests(first, again, ("arrival_s", "prompt_tokens"))  # answers: their trees'
    assert not np.array_equal(first.requests.output_tokens, again.requests.output_tokens)


def test_another_draw_seed_redraws_pipeinfer_acceptance_over_the_same_requests() -> None:
    first = run("pipeinfer_sim.yaml", small=False)  # 8 requests, one at a time; seed 3
    again = run("pipeinfer_sim.yaml", "simulator.draw_seed=4", small=False)
    assert same_requests(first, again, ("prompt_tokens", "output_tokens"))  # a closed loop
    assert not np.array_equal(first.requests.finish_s, again.requests.finish_s)
