"""The calibration's verification probe: a speculative chain's forward and acceptance kernel,
one greedy token emitted per step, the cache rolled back to it."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from decoder_models import interleaved_workload, one_thread, random_model, serve  # noqa: E402

from real_backend.calibration.verify_probe import VerifyWidthProbe  # noqa: E402

single_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


def spied_verification(model) -> list[tuple[int, int, bool, list[int]]]:
    """Per call of the model's greedy_verify: (batch, nodes, chain, accepted lengths)."""
    calls: list[tuple[int, int, bool, list[int]]] = []
    kernels = model.kernel_set()

    def greedy_verify(logits, draft_tokens, draft_lens, parents=None):
        out = kernels.greedy_verify(logits, draft_tokens, draft_lens, parents)
        calls.append((logits.shape[0], logits.shape[1], parents is None, out[0].tolist()))
        return out

    spied = dataclasses.replace(kernels, greedy_verify=greedy_verify)
    model.kernel_set = lambda: spied  # this test's model only
    return calls


@pytest.mark.parametrize("width", [1, 4])
def test_the_probe_emits_greedy_tokens_through_the_verification_kernel(width: int) -> None:
    # A 4-token vocabulary repeats itself often: copies of the newest token are accepted.
    model = random_model(vocab=4, seed=2)
    workload = interleaved_workload(24, 4)
    _, _, vanilla = serve(model, workload)
    calls = spied_verification(model)
    engine, records, outputs = serve(model, workload, lambda m, c: VerifyWidthProbe(m, c, width))
    assert outputs == vanilla  # one greedy token a step, matched copy or not
    decode_steps = int((records.steps.decode_tokens > 0).sum())
    assert len(calls) == decode_steps  # one verification per decode step
    assert all(chain and nodes == 1 + width for _, nodes, chain, _ in calls)
    assert any(n > 0 for *_, accepted in calls for n in accepted)  # the matched-copy branch ran
    assert (records.steps.emitted_tokens == records.steps.batch_size).all()
    assert engine.cache.num_free_blocks == engine.cache.allocator.num_blocks
