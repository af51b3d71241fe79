"""APAR test helpers: random request trees, and continuous batching driven through them with
a physical paged KV cache mirroring every allocation, fork and release the policy plans."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.decoders.apar_walker import BranchWalker
from workbench.apar_trees import BranchTree
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.sequence import Sequence


def random_tree(rng: np.random.Generator, max_children: int = 4, max_len: int = 12) -> BranchTree:
    """A root with up to `max_children` children at distinct positions (depth 2)."""
    root = int(rng.integers(2, max_len + 2))
    positions = sorted(
        rng.choice(
            np.arange(1, root),
            size=min(root - 1, int(rng.integers(0, max_children + 1))),
            replace=False,
        ).tolist()
    )
    parent = (-1, *([0] * len(positions)))
    tokens = (root, *(int(rng.integers(1, max_len)) for _ in positions))
    return BranchTree(parent, (0, *positions), tokens, tokens)


@dataclass
class Drive:
    steps: int = 0
    emitted: dict[int, int] = field(default_factory=dict)  # sequence id → own tokens
    finished: list[int] = field(default_factory=list)  # request ids in finishing order
    preemptions: int = 0  # branches preempted by recompute
    swap_outs: int = 0  # requests swapped out
    max_live_forks: int = 0


def drive(
    policy: ContinuousBatching,
    trees: list[BranchTree],
    prompts: list[int],
    cache=None,  # a real_backend PagedKVCache mirroring the policy, or None
    max_steps: int = 100_000,
) -> Drive:
    """Run every request (all arriving at 0) to its end; forks as the trees say."""
    walker = BranchWalker(first_child_id=len(trees))
    seqs: dict[int, Sequence] = {}
    swapped: dict[int, object] = {}  # request → its blocks in host memory (with a cache)
    out = Drive()
    for i, (tree, prompt) in enumerate(zip(trees, prompts, strict=True)):
        seqs[i] = Sequence(i, 0.0, prompt, tree.tokens[0])
        walker.start(i, tree)
        policy.add(seqs[i], 0.0)
    while (plan := policy.schedule(0.0)) is not None:
        out.steps += 1
        assert out.steps < max_steps, "no progress"
        out.preemptions += len(plan.preempted)
        out.swap_outs += len(plan.swapped_out)
        _check_swaps(policy, plan)
        decodes = [s.request_id for s in policy.decode_sequences()]
        emitting = decodes + [
            c.seq.request_id for c in plan.prefills if c.tokens == c.seq.prefill_remaining
        ]
        if cache is not None:
            _mirror(cache, plan, decodes, swapped)
            used = cache.allocator.num_blocks - cache.num_free_blocks
            assert used <= policy.used_blocks, (used, policy.used_blocks)
        result = policy.complete(plan)
        for sid in emitting:
            out.emitted[sid] = out.emitted.get(sid, 0) + 1
        for fork in walker.emitted(emitting):
            seqs[fork.child_id] = policy.fork(seqs[fork.parent_id], fork.child_id, fork.own_tokens)
        out.max_live_forks = max(out.max_live_forks, len(policy.forks))
        if cache is not None:
            for sid in result.released:
                cache.free(sid)
        for seq in result.finished:
            out.finished.append(seq.request_id)
        assert policy.outstanding() == len(trees) - len(out.finished)
        for seq in result.finished:
            if cache is not None and seq.request_id in cache.tables:
                cache.free(seq.request_id)  # a request that never forked
            walker.finish(seq.request_id)
    return out


def _check_swaps(policy: ContinuousBatching, plan) -> None:
    """Host memory holds what the policy counts; nothing of a request there is in the plan."""
    away = {r.owner for r in policy.swapped}
    assert policy.swap_used == sum(r.blocks for r in policy.swapped) <= policy.swap_blocks
    assert not away & {s.owner for s in plan.preempted}, "a swapped request recomputed"
    assert not away & {m.owner for m in plan.swapped_in}
    assert not {m.owner for m in plan.swapped_out} & {m.owner for m in plan.swapped_in}


def _mirror(cache, plan, decodes: list[int], swapped: dict[int, object]) -> None:
    for sid in [s.request_id for s in plan.preempted] + plan.released:
        if sid in cache.tables:
            cache.free(sid)
    for move in plan.swapped_out:
        swapped[move.owner] = cache.swap_out(move.branches)
    for move in plan.swapped_in:
        cache.swap_in(swapped.pop(move.owner))
    for owner in plan.swap_dropped:
        del swapped[owner]
    for sid in decodes:
        cache.append_slots(sid, 1)
    for chunk in plan.prefills:
        sid = chunk.seq.request_id
        if sid not in cache.tables:
            if chunk.seq.parent_id >= 0:  # a fork: share the parent's prefix
                cache.fork(chunk.seq.parent_id, sid)
                cache.truncate(sid, chunk.context_tokens)
            else:
                assert chunk.context_tokens == 0
                cache.allocate(sid)
        cache.append_slots(sid, chunk.tokens)
