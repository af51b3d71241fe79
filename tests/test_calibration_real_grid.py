"""The designed calibration grid: what each probe covers, its passes, clipping to context."""

from __future__ import annotations

import numpy as np
import pytest

from real_backend.calibration.grid import GRIDS, get_grid
from real_backend.zoo.specs import SPECS
from workbench.errors import WorkbenchError
from workbench.scheduling.blocks import blocks_for


def test_the_standard_grid_covers_every_step_kind_in_three_alternating_passes() -> None:
    grid = get_grid("standard", 2048)
    kinds = {probe.name.split("-")[0] for probe in grid.probes}
    assert kinds == {"decode", "prefill", "chunked", "mixed", "verify", "idle"}
    runs = grid.runs()
    assert len(runs) == 3 * len(grid.probes) and len({run.name for run in runs}) == len(runs)
    first, second = runs[: len(grid.probes)], runs[len(grid.probes) : 2 * len(grid.probes)]
    assert [r.probe for r in second] == [r.probe for r in reversed(first)]
    assert {run.seed for run in runs} == {0, 1, 2}


def test_verifications_are_probed_over_short_long_and_uneven_contexts() -> None:
    """Over one context the price of a verified token's keys cannot be told from its
    tokens' (the fit's a_verify came out 0)."""
    grid = get_grid("standard", 2048)
    equal = {p.prompt_tokens[0] for p in grid.probes if p.width and len(set(p.prompt_tokens)) == 1}
    assert max(equal) >= 4 * min(equal)
    uneven = [p for p in grid.probes if p.width and p.prompt_tokens[1] >= 4 * p.prompt_tokens[0]]
    assert {p.max_batch_size for p in uneven} >= {8, 16}  # the spread's price by batch


def test_probes_a_short_context_cannot_hold_are_left_out() -> None:
    full, short = get_grid("standard", 2048), get_grid("standard", 512)
    assert all(p.prompt_tokens[1] + p.output_tokens[1] + p.width <= 512 for p in short.probes)
    assert "prefill-p1024" not in {p.name for p in short.probes}
    assert len(short.probes) < len(full.probes)


@pytest.mark.parametrize("name", list(GRIDS))
def test_each_probe_has_room_for_its_running_sequences(name: str) -> None:
    for probe in GRIDS[name].probes:
        workload = probe.workload(seed=1)
        assert np.array_equal(workload.prompt_tokens, probe.workload(seed=1).prompt_tokens)
        longest = int((workload.prompt_tokens + workload.output_tokens).max()) + probe.width
        running = min(probe.max_batch_size, probe.concurrency or probe.requests)
        assert probe.kv_blocks() >= running * blocks_for(longest, 16)


def test_an_unknown_grid_is_refused() -> None:
    with pytest.raises(WorkbenchError, match="unknown calibration grid 'huge'") as caught:
        get_grid("huge", 2048)
    assert caught.value.field == "--grid"


def test_every_idle_probe_wakes_after_a_spell_of_decoding() -> None:
    """A wake after a few ms of work costs more once it repeats (on an Intel VM, most likely
    a vCPU slow to resume): the probes measure the wake a loaded engine's idle gaps have,
    after a request's decode."""
    grid = get_grid("standard", 2048)
    idle = [p for p in grid.probes if p.think_s > 0]
    assert {p.name.split("-")[1] for p in idle} >= {"t1", "t128", "t512"}
    assert all(p.output_tokens[0] >= 16 and p.concurrency == 1 for p in idle)


def test_uneven_decodes_are_probed_on_both_sides_of_the_one_call_rule() -> None:
    """The grouped attention computes a step in one call when its padded query-keys times the
    model's width (heads × head_dim) are under CALL_COST, and the fit prices such a step by
    its padded keys, not by the spread's s(B): for the zoo's 256-wide models (8 heads × 32)
    the short-spread probes start under the rule, the long-spread ones over it."""
    pytest.importorskip("torch")
    from kernels.grouped_attention import CALL_COST, padding

    width = SPECS["apar-small"].target.hidden_size
    assert width == SPECS["small"].target.hidden_size
    under, over = set(), set()
    for probe in get_grid("standard", 2048).probes:
        low, high = probe.prompt_tokens
        if probe.width or probe.fork_every or probe.chunk_size or probe.concurrency or low == high:
            continue
        keys = [int(p) + 1 for p in probe.workload(0).prompt_tokens[: probe.max_batch_size]]
        one_call = padding([1] * len(keys), keys) * width < CALL_COST
        (under if one_call else over).add((high, probe.max_batch_size))
    assert {batch for high, batch in under if high <= 96} >= {4, 8, 16}
    assert {batch for high, batch in over if high >= 640} == {4, 8, 16, 32}
