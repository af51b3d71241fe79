"""A decoder implementation's `host_overhead_ms` (lookahead and speculative): its host work
per step, priced by the simulator on every step that decodes with it (Spec-Bench's LADE and
SpS scenarios set it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scenario.scenario import Scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SPECBENCH = {
    "lookahead": SCENARIOS / "specbench_lookahead_a100_vicuna13b.yaml",
    "speculative": SCENARIOS / "specbench_sps_a100_vicuna13b.yaml",
}
BARE = {
    "lookahead": "decoder={kind: lookahead, tokens_per_step: {kind: histogram, counts: [1]}}",
    "speculative": "decoder={kind: speculative, draft: {name: vicuna-68m}}",
}


def _scenario(kind: str, host_overhead_ms: float) -> Scenario:
    return load_scenario(
        SPECBENCH[kind],
        ["workload.num_requests=4", f"decoder.host_overhead_ms={host_overhead_ms}"],
    )


@pytest.mark.parametrize("kind", sorted(SPECBENCH))
def test_every_decoding_step_pays_it_and_nothing_else_changes(kind: str) -> None:
    without = simulate(_scenario(kind, 0.0)).steps
    with_it = simulate(_scenario(kind, 2.5)).steps
    decodes = without.decode_tokens > 0
    assert decodes.any() and (~decodes).any()
    np.testing.assert_array_equal(with_it.emitted_tokens, without.emitted_tokens)
    added = with_it.duration_s - without.duration_s
    np.testing.assert_allclose(added[decodes], 2.5e-3, rtol=1e-9)
    np.testing.assert_array_equal(added[~decodes], 0.0)  # a prompt-only step: no decoder


@pytest.mark.parametrize("kind", sorted(SPECBENCH))
def test_it_defaults_to_zero(kind: str) -> None:
    assert load_scenario(SPECBENCH[kind], [BARE[kind]]).decoder.host_overhead_ms == 0.0


@pytest.mark.parametrize("kind", sorted(SPECBENCH))
def test_a_negative_overhead_is_refused(kind: str) -> None:
    with pytest.raises(WorkbenchError, match=r"decoder\.host_overhead_ms"):
        _scenario(kind, -1.0)
