"""The simulator's parametric APAR trees under the live-branch rule: no fork while a request
has `max_branches` live branches, on the clock the real engine keeps (a child live from the
step after its fork to the step of its EOS); a banned fork's detail is written inline."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.decoders.apar_trees import request_trees, with_live_branch_rule
from workbench.apar_trees import BranchTree
from workbench.scenario.decoders import AparDecoderConfig, AparTreeModelConfig

# Root: items of 2, 2 and 5 tokens, each followed by its fork token (at its 3rd, 6th and
# 12th token), then EOS. Child 1 emits at steps 4-7, child 2 at 7-16, child 3 at 13-14.
TREE = BranchTree(
    parent=(-1, 0, 0, 0),
    fork_at=(0, 3, 6, 12),
    tokens=(13, 4, 10, 2),
    answer_tokens=(9, 3, 9, 1),
)


def test_a_fork_that_finds_max_branches_live_writes_its_detail_inline() -> None:
    # At step 6 child 1 is live (root + 1 = 2): child 2's 9 answer tokens go inline in place
    # of its fork token, so child 3's fork moves from the root's 12th token to its 20th,
    # where child 1 has ended.
    tree = with_live_branch_rule(TREE, max_branches=2)
    assert tree == BranchTree(
        parent=(-1, 0, 0), fork_at=(0, 3, 20), tokens=(21, 4, 2), answer_tokens=(18, 3, 1)
    )
    assert tree.total_answer_tokens == TREE.total_answer_tokens


def test_where_the_rule_never_binds_the_tree_is_unchanged() -> None:
    assert with_live_branch_rule(TREE, max_branches=3) == TREE  # at most 2 live at a fork
    assert with_live_branch_rule(TREE, max_branches=4) is TREE  # 3 children: never 4 live
    assert with_live_branch_rule(TREE, max_branches=1) == BranchTree.single(
        TREE.total_answer_tokens + 1, TREE.total_answer_tokens
    )  # nothing forks: the sequential answer


@pytest.mark.parametrize(("fork", "kept"), [(7, False), (8, True)])
def test_a_child_counts_until_the_step_of_its_eos(fork: int, kept: bool) -> None:
    # Child 1 emits its EOS at step 3 + 4 = 7; it ends after that step's choices.
    tree = BranchTree((-1, 0, 0), (0, 3, fork), (fork + 3, 4, 5), (fork, 3, 4))
    assert (with_live_branch_rule(tree, max_branches=2).branches == 3) is kept


def test_parametric_trees_may_have_more_children_than_live_branches() -> None:
    trees_cfg = AparTreeModelConfig(structured_share=1.0, min_children=6, max_children=6)
    cfg = AparDecoderConfig(kind="apar", max_branches=3, trees=trees_cfg)
    outputs = np.full(200, 120)
    trees = request_trees(cfg, outputs, np.random.default_rng(0), None)
    free = request_trees(
        cfg.model_copy(update={"max_branches": 16}), outputs, np.random.default_rng(0), None
    )
    assert all(t.branches == 7 for t in free)  # the same draws, the rule never binding
    assert all(t.branches < 7 for t in trees)  # two live children ban a third's fork
    for tree, unbound in zip(trees, free, strict=True):
        assert tree.total_answer_tokens == unbound.total_answer_tokens
        assert tree == with_live_branch_rule(unbound, max_branches=3)


def test_a_real_runs_forks_all_pass_the_rule() -> None:
    """Served for real with max_branches 2, every fork the engine made found one branch
    live on the clock the simulator applies the rule with, so the rule keeps them all (a
    clock that keeps children live too long fails here; one that ends them too early fails
    the boundary test above)."""
    pytest.importorskip("torch")
    from apar_real_helpers import frequent_tokens, many_prompts, serve_apar
    from decoder_models import random_model, serve

    model = random_model(48, seed=5)
    w, prompts = many_prompts(24, 48, seed=9)
    tokens = frequent_tokens(serve(model, (w, prompts))[2], 48)
    config = AparDecoderConfig(kind="apar", max_branches=2)
    _engine, real, _ = serve_apar(
        model, (w, prompts), tokens, max_batch_size=64, eos=frozenset({23}), config=config
    )
    assert real.branches is not None
    trees = list(real.branches.trees().values())
    assert sum(t.branches - 1 for t in trees) >= 10  # it forked
    for tree in trees:
        assert with_live_branch_rule(tree, max_branches=2) == tree
