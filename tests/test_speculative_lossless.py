"""Greedy speculative decoding emits exactly greedy vanilla decoding's tokens."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from decoder_models import (  # noqa: E402
    DECODER_VOCAB,
    noisy_copy,
    one_thread,
    random_model,
    serve,
)

from real_backend.decoders.drafter import Drafter  # noqa: E402
from real_backend.decoders.speculative import SpeculativeDecoder  # noqa: E402
from workbench.scenario.decoders import SpeculativeDecoderConfig  # noqa: E402

VOCAB = DECODER_VOCAB  # the conftest target's
single_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


def speculative(draft, **config):
    cfg = SpeculativeDecoderConfig(kind="speculative", **config)

    def make(model, cache):
        draft_cache = draft.new_cache(cache.allocator.num_blocks, cache.block_size)
        return SpeculativeDecoder(model, cache, Drafter(draft, draft_cache, cfg), cfg)

    return make


DRAFTS = {
    "noisy": lambda t: noisy_copy(t, 0.05),
    "self": lambda t: t,  # always right: every draft accepted
    "unrelated": lambda t: random_model(VOCAB, dim=16, layers=1, seed=9),  # mostly wrong
}
CONFIGS = {
    "chain k=1": dict(num_speculative_tokens=1),
    "chain k=4": dict(num_speculative_tokens=4),
    "chain k=7": dict(num_speculative_tokens=7),
    "adaptive": dict(num_speculative_tokens=6, adaptive={"min_tokens": 1, "window": 4}),
    "static tree": dict(tree={"kind": "static", "branching": [3, 2, 1, 1]}),
    "dynamic tree": dict(tree={"kind": "dynamic", "max_nodes": 12, "top_k": 3, "max_depth": 5}),
}


# Every config with the realistic draft; the extreme drafts on a chain and a tree.
CASES = [("noisy", c) for c in CONFIGS] + [
    (d, c) for d in ("self", "unrelated") for c in ("chain k=4", "static tree")
]


@pytest.mark.parametrize(("draft_kind", "config"), CASES)
def test_greedy_equals_vanilla_batched(
    decoder_target, decoder_workload, decoder_vanilla, draft_kind, config
):
    draft = DRAFTS[draft_kind](decoder_target)
    engine, records, outputs = serve(
        decoder_target, decoder_workload, speculative(draft, **CONFIGS[config])
    )
    assert outputs == decoder_vanilla
    assert engine.cache.num_free_blocks == engine.cache.allocator.num_blocks  # nothing leaked
    drafter = engine.decoder.drafter
    assert drafter.cache.num_free_blocks == drafter.cache.allocator.num_blocks
    steps = records.steps
    assert (steps.accepted_tokens <= steps.drafted_tokens).all()
    assert (steps.verified_tokens == steps.decode_tokens + steps.drafted_tokens).all()
    drafting = steps.drafted_tokens > 0
    assert (steps.draft_s[drafting] > 0).all()  # each step times its proposals
    assert (steps.draft_s[steps.decode_tokens == 0] == 0).all()
    assert (steps.draft_s <= steps.duration_s).all()
    if draft_kind == "self":
        assert steps.accepted_tokens.sum() > 0.9 * steps.drafted_tokens.sum() or "tree" in config


@pytest.mark.parametrize("config", ["chain k=4", "static tree"])
def test_greedy_equals_vanilla_alone(decoder_target, decoder_workload, decoder_vanilla, config):
    draft = DRAFTS["noisy"](decoder_target)
    _, _, outputs = serve(
        decoder_target, decoder_workload, speculative(draft, **CONFIGS[config]), max_batch_size=1
    )
    assert outputs == decoder_vanilla


def test_self_draft_chain_accepts_everything_in_fewer_steps(
    decoder_target, decoder_workload, decoder_vanilla
):
    _, vanilla_records, _ = serve(decoder_target, decoder_workload)
    _, records, outputs = serve(
        decoder_target, decoder_workload, speculative(decoder_target, num_speculative_tokens=4)
    )
    assert outputs == decoder_vanilla
    s = records.steps
    assert s.accepted_tokens.sum() == s.drafted_tokens.sum() > 0
    assert len(s.step) < 0.5 * len(vanilla_records.steps.step)
    # Four forwards of the target as its own draft against one verifying forward: the
    # recorded draft time is most of a drafting step's.
    drafting = s.drafted_tokens > 0
    assert s.draft_s[drafting].sum() > 0.4 * s.duration_s[drafting].sum()
    # Emission rows carry the tokens of each multi-token step; they add up to the outputs.
    e = records.emissions
    emitted = ((e.last_step - e.first_step + 1) * e.tokens_per_step).sum()
    assert emitted == records.requests.output_tokens.sum()


def test_a_measured_run_notes_each_draft_forward(decoder_target, decoder_workload, decoder_vanilla):
    """What a twin prices a served run's drafting against: each step's draft forwards as the
    drafter ran them, one row per drafted token, with their measured time."""
    from real_backend.calibration.probe_engine import ProfilingEngine

    draft = DRAFTS["noisy"](decoder_target)
    make = speculative(draft, num_speculative_tokens=4)
    engine, records, outputs = serve(
        decoder_target, decoder_workload, make, engine_class=ProfilingEngine
    )
    assert outputs == decoder_vanilla  # noting changes nothing
    drafting = [d for d in engine.drafts if d.forwards]
    rows = sum(len(forward) for d in drafting for forward in d.forwards)
    assert rows == records.steps.drafted_tokens.sum() > 0
    for d in drafting:
        first, *rest = d.forwards
        assert len(d.forwards) <= 4 and len(first) >= len(rest[0] if rest else ())
        assert all(new == 1 and cached > 0 for forward in rest for new, cached in forward)
    firsts = [row for d in drafting for row in d.forwards[0]]
    assert any(cached == 0 for _, cached in firsts)  # a prompt, prefilled
    assert any(new == 2 and cached > 0 for new, cached in firsts)  # a whole chain's catch-up
    assert sorted(d.draft_s for d in drafting) == sorted(
        records.steps.draft_s[records.steps.drafted_tokens > 0]
    )
