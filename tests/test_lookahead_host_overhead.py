"""Lookahead's `host_overhead_ms`: the implementation's host work per step, priced by the
simulator on every step that decodes with it (Spec-Bench's LADE scenarios set it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scenario.scenario import Scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SCENARIO = SCENARIOS / "specbench_lookahead_a100_vicuna13b.yaml"


def _lookahead(host_overhead_ms: float) -> Scenario:
    return load_scenario(
        SCENARIO,
        ["workload.num_requests=4", f"decoder.host_overhead_ms={host_overhead_ms}"],
    )


def test_every_decoding_step_pays_it_and_nothing_else_changes() -> None:
    without = simulate(_lookahead(0.0)).steps
    with_it = simulate(_lookahead(2.5)).steps
    decodes = without.decode_tokens > 0
    assert decodes.any() and (~decodes).any()
    np.testing.assert_array_equal(with_it.emitted_tokens, without.emitted_tokens)
    added = with_it.duration_s - without.duration_s
    np.testing.assert_allclose(added[decodes], 2.5e-3, rtol=1e-9)
    np.testing.assert_array_equal(added[~decodes], 0.0)  # a prompt-only step: no lookahead


def test_it_defaults_to_zero() -> None:
    decoder = "decoder={kind: lookahead, tokens_per_step: {kind: histogram, counts: [1]}}"
    scenario = load_scenario(SCENARIO, [decoder])
    assert scenario.decoder.host_overhead_ms == 0.0


def test_a_negative_overhead_is_refused() -> None:
    with pytest.raises(WorkbenchError, match=r"decoder\.host_overhead_ms"):
        _lookahead(-1.0)
