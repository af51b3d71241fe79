"""APAR request trees for the simulator: drawn from parameters, or replayed from a real run.

Parametric (`decoder.trees`): a request's answer, decoded sequentially, would emit its
workload `output_tokens` L (L − 1 answer tokens and an EOS). A share of requests is
structured: k children (uniform in [min_children, max_children]); the root writes
`skeleton_share` of the answer as k items, each followed by a fork token, then an EOS; the
children split the rest (Dirichlet shares, at least one token each), each ending with an
EOS. The others decode as one branch of L tokens. Then the live-branch rule, as the real
engine applies it (`real_backend.decoders.apar.ForkRules`): no fork while the request has
`max_branches` live branches, counted on the tree's own clock (every live branch emits a
token a step, as it does unless the batch is full or the request preempted; speculation
emits more, so there the clock is an approximation). A fork it bans writes its detail
inline, as the model does with the fork token banned: the root emits the detail's tokens in
place of its fork token, and its later items come that much later. Replayed
(`calibrate_from`): request i gets the i-th stored tree (modulo their number), as recorded,
the rule's effect in it. Without forks (max_branches 1 or max_depth 1) every tree becomes
one branch emitting its answer and an EOS: the sequential answer of the same text.
"""

from __future__ import annotations

import numpy as np

from workbench.apar_trees import BranchTree
from workbench.scenario.decoders import AparDecoderConfig, AparTreeModelConfig


def parametric_tree(
    rng: np.random.Generator, output_tokens: int, cfg: AparTreeModelConfig
) -> BranchTree:
    answer = output_tokens - 1
    structured = rng.random() < cfg.structured_share
    children = int(rng.integers(cfg.min_children, cfg.max_children + 1))
    skeleton = max(children, round(cfg.skeleton_share * answer))
    children = min(children, answer - skeleton)  # each child writes a token at least
    if not structured or children < 1:
        return BranchTree.single(output_tokens, answer)
    details = _split(rng, answer - skeleton, children, cfg.detail_concentration)  # (k,)
    items = _split(rng, skeleton, children, None)  # (k,) the root's tokens before each fork
    fork_at = np.cumsum(items + 1)  # each item is followed by its fork token
    return BranchTree(
        parent=(-1, *([0] * children)),
        fork_at=(0, *fork_at.tolist()),
        tokens=(skeleton + children + 1, *(details + 1).tolist()),
        answer_tokens=(skeleton, *details.tolist()),
    )


def with_live_branch_rule(tree: BranchTree, max_branches: int) -> BranchTree:
    """The root's forks that find fewer than `max_branches` live branches; the others' details
    written inline. The root emits its t-th token at step t, a child forked at f its own
    t-th at f + t, and a child is live from the step after its fork to the step of its EOS
    (ended after the step's choices, as `ForkRules.ended`)."""
    if tree.branches <= max_branches:  # a fork finds at most its earlier siblings live
        return tree
    kept: list[tuple[int, int, int]] = []  # (fork_at, tokens, answer_tokens) of each child
    root_tokens, root_answer, shift = tree.tokens[0], tree.answer_tokens[0], 0
    for child in sorted(range(1, tree.branches), key=lambda c: tree.fork_at[c]):
        assert tree.parent[child] == 0, "parametric trees fork from the root only"
        at, tokens, answer = (
            tree.fork_at[child] + shift,
            tree.tokens[child],
            tree.answer_tokens[child],
        )
        live = 1 + sum(f < at <= f + n for f, n, _ in kept)
        if live < max_branches:
            kept.append((at, tokens, answer))
            continue
        shift += answer - 1  # the detail in place of the fork token
        root_tokens, root_answer = root_tokens + answer - 1, root_answer + answer
    return BranchTree(
        parent=(-1, *([0] * len(kept))),
        fork_at=(0, *(f for f, _, _ in kept)),
        tokens=(root_tokens, *(n for _, n, _ in kept)),
        answer_tokens=(root_answer, *(a for _, _, a in kept)),
    )


def _split(
    rng: np.random.Generator, total: int, parts: int, concentration: float | None
) -> np.ndarray:
    """`total` tokens in `parts` parts of at least one: equal (None), or Dirichlet shares."""
    spare = total - parts
    if concentration is None:
        shares = np.full(parts, 1.0 / parts)
    else:
        shares = rng.dirichlet(np.full(parts, concentration))
    extra = np.floor(shares * spare).astype(np.int64)
    extra[: spare - int(extra.sum())] += 1  # the rounding remainder, to the first parts
    return 1 + extra


def sequential(tree: BranchTree) -> BranchTree:
    """The same answer written by one branch: its answer tokens and an EOS."""
    return BranchTree.single(tree.total_answer_tokens + 1, tree.total_answer_tokens)


def request_trees(
    cfg: AparDecoderConfig,
    output_tokens: np.ndarray,
    rng: np.random.Generator,
    replayed: list[BranchTree] | None,
) -> list[BranchTree]:
    """One tree per request: (n,) output lengths → n trees."""
    if replayed is not None:
        trees = [replayed[i % len(replayed)] for i in range(len(output_tokens))]
    else:
        trees = [
            with_live_branch_rule(parametric_tree(rng, int(n), cfg.trees), cfg.max_branches)
            for n in output_tokens.tolist()
        ]
    return trees if cfg.forks else [sequential(t) for t in trees]


def longest_branch(tree: BranchTree, prompt_tokens: int) -> int:
    """The most tokens a branch's visible context reaches: prompt + what it sees + its own."""
    return int((tree.context_start(prompt_tokens) + np.asarray(tree.tokens)).max())
