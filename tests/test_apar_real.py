"""APAR on the real engine: every branch equals greedy decoding of its visible context alone
(many prompts, batch 1 and batched, with preemptions forced by a small cache), the logit
rules hold, the records add up, the answer is the tree's in-order walk, and the cache's
reference counts are back to zero."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from apar_real_helpers import (  # noqa: E402
    check_branches_equal_alone,
    random_apar_setup,
    serve_apar,
)
from decoder_models import one_thread  # noqa: E402

from real_backend.decoders.apar import ForkRules, ForkTokens  # noqa: E402
from workbench.apar_records import reassemble  # noqa: E402
from workbench.apar_trees import BranchTree  # noqa: E402
from workbench.invariants import violations  # noqa: E402
from workbench.scenario.decoders import AparDecoderConfig  # noqa: E402
from workbench.workload.requests import Workload  # noqa: E402

VOCAB = 48
one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


@pytest.fixture(scope="module")
def setup():
    return random_apar_setup(VOCAB)


@pytest.mark.parametrize(
    ("batch", "blocks", "swap"),
    [(1, 512, 0), (8, 512, 0), (8, 40, 0), (8, 40, 10**6), (8, 40, 12)],
    ids=["batch 1", "batched", "preempting", "swapping", "swap space full"],
)
def test_each_branch_equals_greedy_decoding_of_its_visible_context(
    setup, batch, blocks, swap
) -> None:
    model, workload, tokens, eos = setup
    engine, records, _answers = serve_apar(
        model, workload, tokens, max_batch_size=batch, num_blocks=blocks, eos=eos, swap_blocks=swap
    )
    children = check_branches_equal_alone(engine, records, model, workload, tokens, eos)
    assert children >= 20  # the rule was checked on many forks
    assert violations(records, kv_blocks=blocks) == []
    if blocks == 40:
        assert records.requests.preemptions.sum() > 0
    assert (engine.policy.swap_outs > 0) == (swap > 0)
    assert (engine.policy.swaps_refused > 0) == (swap == 12)
    assert sum(engine.cache.allocator.refcount) == 0 and not engine.cache.tables
    assert not engine._swapped


@pytest.mark.parametrize(("blocks", "swap"), [(23, 0), (47, 0), (23, 10**6), (47, 10**6)])
def test_grandchildren_survive_preemption(setup, blocks, swap) -> None:
    """max_depth 3: a preempted request's held ancestors above a released branch are
    released with its last branch (nothing stays held); swapped out, they come back held."""
    model, workload, tokens, eos = setup
    config = AparDecoderConfig(kind="apar", max_branches=64, max_depth=3)
    engine, records, _ = serve_apar(
        model, workload, tokens, num_blocks=blocks, eos=eos, config=config, swap_blocks=swap
    )
    assert (engine.policy.swap_outs > 0) == (swap > 0)
    # A swapped request whose next decodes outgrow the whole cache is recomputed after all.
    assert (engine.policy.swaps_recomputed > 0) == (swap > 0)
    check_branches_equal_alone(engine, records, model, workload, tokens, eos, config)
    assert (
        max(t.depth(b) for t in records.branches.trees().values() for b in range(t.branches)) == 3
    )
    assert records.requests.preemptions.sum() > 0
    assert violations(records, kv_blocks=blocks) == []
    assert sum(engine.cache.allocator.refcount) == 0 and not engine.cache.tables


def test_one_request_at_a_time_runs_its_branches_together(setup) -> None:
    model, (w, prompts), tokens, eos = setup
    alone = Workload(
        arrival_s=np.full(len(w), np.nan),
        prompt_tokens=w.prompt_tokens,
        output_tokens=w.output_tokens,
        closed_loop_concurrency=1,
    )
    _engine, records, _ = serve_apar(model, (alone, prompts), tokens, eos=eos)
    assert records.steps.batch_size.max() > 1  # branches of the one request in flight
    trees = records.branches.trees()
    forked = [rid for rid, t in trees.items() if t.branches > 1]
    emissions = records.emissions
    multi = emissions.tokens_per_step > 1  # one request's branches in one step
    assert forked and set(emissions.request_id[multi].tolist()) <= set(forked)
    assert multi.any()


def test_the_answer_is_the_in_order_walk(setup) -> None:
    model, workload, tokens, eos = setup
    engine, records, answers = serve_apar(model, workload, tokens, eos=eos)
    skip = {tokens.fork} | eos
    for rid, tree in records.branches.trees().items():
        own = engine.branch_outputs[rid]
        assert answers[rid] == reassemble(tree, own, skip)
        assert len(answers[rid]) == tree.total_answer_tokens
    again = serve_apar(model, workload, tokens, max_batch_size=3, eos=eos)[2]
    assert again == answers  # whatever the batching: deterministic


def test_reassembly_order() -> None:
    fork, eos = 90, 91
    tree = BranchTree((-1, 0, 0, 1), (0, 2, 4, 2), (5, 3, 2, 2), (3, 2, 1, 1))
    own = [[1, fork, 2, fork, eos], [10, fork, 11], [20, eos], [30, eos]]
    # root "1", child 1 ("10", its child 3 "30", then "11"), root "2", child 2 "20"
    assert reassemble(tree, own, {fork, eos}) == [1, 10, 30, 11, 2, 20]


def test_logit_rules() -> None:
    fork, child = 7, 8
    rules = ForkRules(ForkTokens(fork, child), max_depth=2, max_branches=3)
    assert rules.banned(0, last_token=1, room=10) == [child]  # a root may fork
    assert rules.banned(0, last_token=fork, room=10) == [child, fork]  # not right after one
    assert rules.banned(0, last_token=1, room=2) == [child, fork]  # no room for both
    rules.forked(0, 100)
    assert rules.banned(100, last_token=child, room=10) == [child, fork]  # after the child token
    assert rules.banned(100, last_token=1, room=10) == [child, fork]  # depth 2 = max_depth
    rules.forked(0, 101)  # three live branches: the request's maximum
    assert rules.banned(0, last_token=1, room=10) == [child, fork]
    rules.ended(101)
    assert rules.banned(0, last_token=1, room=10) == [child]


def test_one_branch_at_most_is_vanilla_with_forks_banned(setup) -> None:
    model, workload, tokens, eos = setup
    config = AparDecoderConfig(kind="apar", max_branches=1)
    _e, records, answers = serve_apar(model, workload, tokens, eos=eos, config=config)
    assert all(t.branches == 1 for t in records.branches.trees().values())
    assert all(tokens.fork not in a for a in answers.values())
    assert (records.emissions.tokens_per_step == 1).all()


def test_sampling_is_reproducible(setup) -> None:
    model, workload, tokens, eos = setup
    config = AparDecoderConfig(kind="apar", temperature=1.0, max_branches=64)
    first = serve_apar(model, workload, tokens, eos=eos, config=config)[2]
    with contextlib.nullcontext():
        second = serve_apar(model, workload, tokens, max_batch_size=2, eos=eos, config=config)[2]
    assert first == second


def test_a_model_without_fork_tokens_is_refused_in_one_line(tmp_path) -> None:
    from tokenizer_folders import tokenizer_folder

    from real_backend.decoders.apar import fork_tokens
    from workbench.errors import WorkbenchError

    folder = tokenizer_folder(tmp_path / "plain")
    with pytest.raises(WorkbenchError) as error:
        fork_tokens(folder, AparDecoderConfig(kind="apar"))
    line = error.value.one_line()
    assert "no [Fork] nor [Child] token" in line and "apar-tiny" in line and "\n" not in line
    assert error.value.field == "decoder.kind"  # the defaults missing: not an APAR model
    with pytest.raises(WorkbenchError, match="has none"):
        fork_tokens(tmp_path, AparDecoderConfig(kind="apar"))
    custom = AparDecoderConfig(kind="apar", fork_token="[Nope]")
    with pytest.raises(WorkbenchError) as error:
        fork_tokens(folder, custom)
    assert error.value.field == "decoder.fork_token"  # the user's own token named


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [({"child_token": "[Fork]"}, "expected two tokens"), ({"fork_token": ""}, "at least 1")],
)
def test_fork_and_child_tokens_are_two_tokens(tokens: dict, expected: str) -> None:
    import pydantic

    with pytest.raises(pydantic.ValidationError, match=expected):
        AparDecoderConfig(kind="apar", **tokens)
