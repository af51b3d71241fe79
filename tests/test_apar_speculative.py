"""APAR with speculative decoding on the real engine: every branch drafts and verifies like
any sequence, under the fork rules; greedy output is exactly APAR's without a draft, whatever
the draft (always right, mostly right, mostly wrong), batch 1 and batched, with preemptions."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from apar_real_helpers import (  # noqa: E402
    check_branches_equal_alone,
    random_apar_setup,
    serve_apar,
)
from decoder_models import noisy_copy, one_thread, random_model  # noqa: E402

from workbench.invariants import violations  # noqa: E402
from workbench.scenario.decoders import AparDecoderConfig, AparSpeculationConfig  # noqa: E402

VOCAB = 48
FIELD = "decoder.speculative.draft"
one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


def speculating(k: int = 4, **sampling: float) -> AparDecoderConfig:
    spec = AparSpeculationConfig(num_speculative_tokens=k)
    return AparDecoderConfig(kind="apar", max_branches=64, speculative=spec, **sampling)


@pytest.fixture(scope="module")
def setup():
    model, workload, tokens, eos = random_apar_setup(VOCAB)
    _e, plain_records, plain = serve_apar(model, workload, tokens, eos=eos)
    return model, workload, tokens, eos, plain, plain_records


DRAFTS = {
    "always right": lambda model: model,
    "mostly right": lambda model: noisy_copy(model, 0.05),
    "mostly wrong": lambda model: random_model(VOCAB, seed=77),
}


@pytest.mark.parametrize("draft", list(DRAFTS))
@pytest.mark.parametrize(
    ("batch", "blocks"), [(1, 512), (8, 512), (8, 48)], ids=["batch 1", "batched", "preempting"]
)
def test_each_branch_equals_greedy_decoding_of_its_visible_context(
    setup, draft, batch, blocks
) -> None:
    model, workload, tokens, eos, plain, _ = setup
    engine, records, answers = serve_apar(
        model, workload, tokens, max_batch_size=batch, num_blocks=blocks, eos=eos,
        config=speculating(), draft=DRAFTS[draft](model),
    )  # fmt: skip
    config = speculating()
    children = check_branches_equal_alone(engine, records, model, workload, tokens, eos, config)
    assert children >= 20
    assert answers == plain  # APAR's own answers, token for token
    assert violations(records, kv_blocks=blocks) == []
    if blocks == 48:
        assert records.requests.preemptions.sum() > 0
    drafter = engine.decoder.speculation.drafter
    for cache in (engine.cache, drafter.cache):
        assert sum(cache.allocator.refcount) == 0 and not cache.tables


def test_a_right_draft_saves_steps_and_a_wrong_one_costs_none(setup) -> None:
    model, workload, tokens, eos, _plain, plain_records = setup
    runs = {
        name: serve_apar(model, workload, tokens, eos=eos, config=speculating(), draft=d(model))[1]
        for name, d in DRAFTS.items()
    }
    plain_steps = len(plain_records.steps.step)
    right, wrong = runs["always right"].steps, runs["mostly wrong"].steps
    assert len(right.step) < 0.6 * plain_steps
    assert right.accepted_tokens.sum() > 0.5 * right.drafted_tokens.sum()
    assert len(wrong.step) <= plain_steps + 2  # a rejected draft still emits the target's token
    mostly = runs["mostly right"].steps
    assert 0 < mostly.accepted_tokens.sum() <= mostly.drafted_tokens.sum()


def test_sampling_is_reproducible(setup) -> None:
    model, workload, tokens, eos, _plain, _ = setup
    config = speculating(temperature=1.0)
    draft = noisy_copy(model, 0.05)
    first = serve_apar(model, workload, tokens, eos=eos, config=config, draft=draft)[2]
    second = serve_apar(
        model, workload, tokens, max_batch_size=2, eos=eos, config=config, draft=draft
    )[2]
    assert first == second


def test_the_config_counts_draft_slots() -> None:
    assert speculating(6).max_draft_tokens == 6
    assert AparDecoderConfig(kind="apar").max_draft_tokens == 0
    spec = speculating(3, temperature=0.5).speculative_config()
    assert spec is not None and spec.num_speculative_tokens == 3 and spec.temperature == 0.5


def test_a_zoo_draft_resolved_to_its_folder_speculates(tmp_path) -> None:
    """The runner sets a zoo draft's folder beside its name (`with_model_source`): the
    branches' speculative config takes it as it is, not refused as two sources."""
    from workbench.scenario.decoders import DraftModelConfig, draft_of, with_draft

    apar = AparDecoderConfig(
        kind="apar", speculative=AparSpeculationConfig(draft=DraftModelConfig(zoo="apar-small"))
    )
    draft = draft_of(apar)
    assert draft is not None
    resolved = with_draft(apar, draft.model_copy(update={"config_path": tmp_path}))
    spec = resolved.speculative_config()
    assert (
        spec is not None and spec.draft.config_path == tmp_path and spec.draft.zoo == "apar-small"
    )


def _added_tokens(folder, fork: int, child: int | None):
    import json

    folder.mkdir()
    added = [{"content": "[Fork]", "id": fork}]
    if child is not None:
        added.append({"content": "[Child]", "id": child})
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))
    return folder


@pytest.mark.parametrize(
    ("fork", "child", "message"),
    [(5, 7, "numbers [Fork] and [Child] 5 and 7, the target 5 and 6"), (5, None, "the draft:")],
)
def test_a_draft_with_other_fork_tokens_is_refused_in_one_line(
    tmp_path, fork, child, message
) -> None:
    from real_backend.decoders.apar import ForkTokens
    from real_backend.decoders.factory import check_draft_fork_tokens
    from workbench.errors import WorkbenchError

    draft = _added_tokens(tmp_path / "draft", fork, child)
    with pytest.raises(WorkbenchError) as error:
        check_draft_fork_tokens(draft, speculating(), ForkTokens(5, 6), FIELD)
    line = error.value.one_line()
    assert message in line and FIELD in line and "\n" not in line


@pytest.mark.parametrize(("block_size", "blocks", "k"), [(4, 20, 8), (8, 12, 16), (16, 6, 16)])
def test_long_drafts_in_a_tight_cache_keep_the_answers(setup, block_size, blocks, k) -> None:
    """Ended branches held for their forks keep their tokens' blocks only (not a draft's
    headroom, nor tokens accepted past their EOS), so the policy's count stays the cache's."""
    model, workload, tokens, eos, plain, _ = setup
    engine, records, answers = serve_apar(
        model, workload, tokens, eos=eos, config=speculating(k), draft=model,
        block_size=block_size, num_blocks=blocks,
    )  # fmt: skip
    assert answers == plain
    assert records.requests.preemptions.sum() > 0
    assert violations(records, kv_blocks=blocks) == []
    drafter = engine.decoder.speculation.drafter
    for cache in (engine.cache, drafter.cache):
        assert sum(cache.allocator.refcount) == 0 and not cache.tables
