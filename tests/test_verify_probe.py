"""The calibration's verification probe runs what a speculative chain's verification runs (the
causal forward, the acceptance kernel), emits one greedy token per step and rolls the cache
back to it; the speculative decoder verifies a chain so, and a tree with its parents."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from decoder_models import (  # noqa: E402
    checked,
    interleaved_workload,
    noisy_copy,
    one_thread,
    random_model,
    serve,
    spied_steps,
    spied_verification,
)

from real_backend.calibration.verify_probe import VerifyWidthProbe  # noqa: E402
from workbench.scenario.decoders import SpeculativeDecoderConfig  # noqa: E402

single_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


@pytest.mark.parametrize("width", [1, 4])
def test_the_probe_emits_greedy_tokens_through_the_verification_kernel(width: int) -> None:
    # A 4-token vocabulary repeats itself often: copies of the newest token are accepted.
    model = random_model(vocab=4, seed=2)
    workload = interleaved_workload(24, 4)
    _, _, vanilla = serve(model, workload)
    calls, steps = spied_verification(model), spied_steps(model)
    engine, records, outputs = serve(model, workload, lambda m, c: VerifyWidthProbe(m, c, width))
    assert outputs == vanilla  # one greedy token a step, matched copy or not
    decode_steps = int((records.steps.decode_tokens > 0).sum())
    assert len(calls) == decode_steps  # one verification per decode step
    assert all(chain and nodes == 1 + width for _, nodes, chain, _ in calls)
    assert any(n > 0 for *_, accepted in calls for n in accepted)  # the matched-copy branch ran
    assert (records.steps.emitted_tokens == records.steps.batch_size).all()
    assert engine.cache.num_free_blocks == engine.cache.allocator.num_blocks
    assert all(s.parents is None and s.mask is None for s in steps)  # the causal path only


@pytest.mark.parametrize(
    "config, chain",
    [
        ({"num_speculative_tokens": 4}, True),
        ({"tree": {"kind": "static", "branching": [2, 2, 1]}}, False),
    ],
    ids=["chain", "tree"],
)
def test_the_decoder_verifies_a_chain_as_the_probe_does_and_a_tree_with_parents(
    config: dict, chain: bool
) -> None:
    target = random_model(vocab=48, seed=4)
    draft = noisy_copy(target, 0.08, seed=5)
    workload = interleaved_workload(12, 48)
    calls, steps = spied_verification(target), spied_steps(target)
    cfg = SpeculativeDecoderConfig(kind="speculative", **config)
    _, records, _ = serve(target, workload, checked(draft, cfg))
    assert len(calls) == int((records.steps.decode_tokens > 0).sum())
    assert all(is_chain == chain for _, _, is_chain, _ in calls)
    verifying = [s for s in steps if len(s.tokens) > 1 and s.parents is not None]
    assert (not verifying) == chain  # a chain sends no parents: the causal forward
