"""Continuous batching with APAR branches: forks share the parent's prefix, are admitted
before new requests, every branch emits exactly its tokens, and the blocks the policy
counts always cover a real paged cache's (shared prefixes once, copy-on-write), back to
zero at the end, under KV pressure with whole-request preemptions too."""

from __future__ import annotations

import numpy as np
import pytest
from apar_helpers import drive, random_tree
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from simulator.decoders.apar_trees import longest_branch
from workbench.apar_trees import BranchTree
from workbench.scheduling.blocks import blocks_for
from workbench.scheduling.branches import BranchGroup
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.sequence import Sequence
from workbench.scheduling.swap_space import SwappedRequest


def policy(num_blocks: int = 1000, **overrides: int | bool) -> ContinuousBatching:
    args = dict(
        num_blocks=num_blocks,
        block_size=4,
        max_batch_size=16,
        max_batched_tokens=256,
        branching=True,
    )
    args.update(overrides)
    return ContinuousBatching(**args)  # type: ignore[arg-type]


def test_a_fork_computes_two_tokens_over_the_shared_prefix() -> None:
    p = policy()
    root = Sequence(0, 0.0, prompt_tokens=6, output_tokens=10)
    p.add(root, 0.0)
    p.complete(p.schedule(0.0))  # prefill: token 1
    p.complete(p.schedule(0.0))  # decode: token 2, the fork token
    used = p.used_blocks
    child = p.fork(root, 100, own_tokens=3)
    assert (child.owner, child.generated, child.computed) == (0, 3, 7)  # prompt + 2 − 1 cached
    assert child.shared_blocks == 1 and child.prefill_remaining == 2
    plan = p.schedule(0.0)
    [chunk] = plan.prefills
    assert chunk.seq is child and (chunk.tokens, chunk.context_tokens) == (2, 7)
    # The child holds its copy of the shared partly filled block (7 % 4 ≠ 0) and a new one
    # for position 8; the parent's decode of token 3 needs no block (position 7 fits).
    assert p.used_blocks - used == blocks_for(9, 4) - 1
    result = p.complete(plan)
    assert child in result.started and child.generated == 4  # its first own token
    assert p.outstanding() == 1  # one request, two sequences


def test_branches_end_the_request_together_and_release_everything() -> None:
    tree = BranchTree((-1, 0, 0), (0, 2, 4), (6, 5, 2), (4, 4, 1))
    p = policy()
    out = drive(p, [tree], [5])
    assert out.finished == [0]
    assert sorted(out.emitted.values()) == sorted(tree.tokens)
    assert p.used_blocks == 0 and not p.groups and p.outstanding() == 0


def test_forks_go_before_waiting_requests() -> None:
    p = policy(max_batch_size=2)
    for rid in range(2):
        p.add(Sequence(rid, 0.0, 4, 10), 0.0)
    p.complete(p.schedule(0.0))
    p.add(Sequence(2, 0.0, 4, 10), 0.0)  # waits: the batch is full
    p.complete(p.schedule(0.0))
    root = p.running[0]
    p.fork(root, 100, own_tokens=2)
    # A fork waits like a request for a batch slot (deferred, not refused): request 1 ends,
    # and the fork, not request 2, takes its slot.
    stopped = p.complete(p.schedule(0.0), stopped={1})
    assert [s.request_id for s in stopped.finished] == [1]
    plan = p.schedule(0.0)
    assert [c.seq.request_id for c in plan.prefills] == [100]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_blocks=st.integers(30, 120),
    block_size=st.sampled_from([1, 2, 4, 8]),
    chunked=st.booleans(),
    swap_blocks=st.sampled_from([0, 6, 10**6]),
)
def test_real_cache_fits_within_the_policy_count_under_pressure(
    seed: int, num_blocks: int, block_size: int, chunked: bool, swap_blocks: int
) -> None:
    torch = pytest.importorskip("torch")
    from real_backend.kv_cache import PagedKVCache

    rng = np.random.default_rng(seed)
    trees = [random_tree(rng) for _ in range(12)]
    prompts = rng.integers(1, 10, len(trees)).tolist()
    worst = max(
        blocks_for(p + t.total_tokens, block_size) for p, t in zip(prompts, trees, strict=True)
    )
    num_blocks = max(num_blocks // block_size, worst + 3)
    p = policy(
        num_blocks=num_blocks,
        block_size=block_size,
        max_batch_size=8,
        max_batched_tokens=8 if chunked else 256,
        chunked_prefill=chunked,
        chunk_size=8,
        swap_blocks=swap_blocks,
    )
    cache = PagedKVCache(1, num_blocks, block_size, 1, 1, dtype=torch.float32)
    out = drive(p, trees, prompts, cache)
    assert p.swap_used == 0 and not p.swapped
    assert sorted(out.finished) == list(range(len(trees)))
    expected = sorted(t for tree in trees for t in tree.tokens)
    assert sorted(out.emitted.values()) == expected  # no token lost or duplicated
    assert p.used_blocks == 0 and not cache.tables
    assert sum(cache.allocator.refcount) == 0 and cache.num_free_blocks == num_blocks


def test_kv_pressure_preempts_whole_requests() -> None:
    torch = pytest.importorskip("torch")
    from real_backend.kv_cache import PagedKVCache

    rng = np.random.default_rng(7)
    trees = [random_tree(rng, max_children=6, max_len=20) for _ in range(30)]
    prompts = [8] * len(trees)
    p = policy(num_blocks=60, max_batch_size=16)
    cache = PagedKVCache(1, 60, 4, 1, 1, dtype=torch.float32)
    out = drive(p, trees, prompts, cache)
    assert out.preemptions > 0 and sorted(out.finished) == list(range(len(trees)))
    assert sum(cache.allocator.refcount) == 0 and p.used_blocks == 0


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_blocks=st.integers(20, 60),
    block_size=st.sampled_from([1, 2]),
    chunk_size=st.sampled_from([3, 4]),
    swap_blocks=st.sampled_from([0, 12, 10**6]),
    max_batch=st.sampled_from([4, 16]),
)
# Once a livelock: a root that ended stayed held for children that recompute (they no longer
# read its blocks), and a prompt too long for the rest kept preempting itself chunk by chunk.
@example(seed=412, num_blocks=29, block_size=2, chunk_size=4, swap_blocks=10**6, max_batch=16)
def test_tiny_chunks_under_pressure_always_progress(
    seed: int, num_blocks: int, block_size: int, chunk_size: int, swap_blocks: int, max_batch: int
) -> None:
    torch = pytest.importorskip("torch")
    from real_backend.kv_cache import PagedKVCache

    rng = np.random.default_rng(seed)
    trees = [random_tree(rng, 6, 20) for _ in range(int(rng.integers(5, 25)))]
    prompts = [int(rng.integers(2, 12)) for _ in trees]
    longest = max(longest_branch(t, prompt) for t, prompt in zip(trees, prompts, strict=True))
    assume(blocks_for(longest + 1, block_size) <= num_blocks - 2)  # every branch fits alone
    p = policy(
        num_blocks=num_blocks,
        block_size=block_size,
        max_batch_size=max_batch,
        max_batched_tokens=chunk_size,
        chunked_prefill=True,
        chunk_size=chunk_size,
        swap_blocks=swap_blocks,
    )
    cache = PagedKVCache(1, num_blocks, block_size, 1, 1, dtype=torch.float32)
    out = drive(p, trees, prompts, cache, max_steps=20_000)
    assert sorted(out.finished) == list(range(len(trees)))
    assert sorted(out.emitted.values()) == sorted(t for tree in trees for t in tree.tokens)
    assert p.used_blocks == 0 and p.swap_used == 0 and not cache.tables


@pytest.mark.parametrize("swap_blocks", [10**6, 12])
def test_kv_pressure_swaps_requests_with_several_branches(swap_blocks: int) -> None:
    """vLLM's rule: a request with several live branches is swapped to host memory and comes
    back whole; one branch alone, or one that finds the host memory full, is recomputed."""
    torch = pytest.importorskip("torch")
    from real_backend.kv_cache import PagedKVCache

    rng = np.random.default_rng(7)
    trees = [random_tree(rng, max_children=6, max_len=20) for _ in range(30)]
    p = policy(num_blocks=60, max_batch_size=16, swap_blocks=swap_blocks)
    cache = PagedKVCache(1, 60, 4, 1, 1, dtype=torch.float32)
    seen = _swapped_requests(p)
    out = drive(p, trees, [8] * len(trees), cache)
    assert out.swap_outs > 0 and out.swap_outs == p.swap_outs
    assert all(live >= 2 for live in seen)  # never a single branch
    assert (p.swaps_refused > 0) == (swap_blocks == 12)  # a full host memory recomputes
    assert sorted(out.finished) == list(range(len(trees)))
    expected = sorted(t for tree in trees for t in tree.tokens)
    assert sorted(out.emitted.values()) == expected  # no token lost or duplicated
    assert sum(cache.allocator.refcount) == 0 and p.used_blocks == 0 and p.swap_used == 0


def _swapped_requests(p: ContinuousBatching) -> list[int]:
    """Live branches of each request `p` swaps out, recorded as it does."""
    seen: list[int] = []
    swap_out = p._swap_out

    def recording(owner: int, victims: list[Sequence]) -> None:
        seen.append(len(p.groups[owner].live))
        assert p.swap_used + sum(v.blocks for v in victims) <= p.swap_blocks
        swap_out(owner, victims)

    p._swap_out = recording  # type: ignore[method-assign]
    return seen


def test_swapped_requests_come_back_before_waiting_ones() -> None:
    p = policy(num_blocks=10, max_batch_size=4, swap_blocks=100)
    p.add(Sequence(0, 0.0, prompt_tokens=8, output_tokens=14), 0.0)
    p.complete(p.schedule(0.0))
    second = Sequence(1, 0.0, prompt_tokens=8, output_tokens=12)
    p.add(second, 0.0)
    p.complete(p.schedule(0.0))  # request 1's prefill, request 0 decoding
    p.complete(p.schedule(0.0))  # request 1's fork token
    p.fork(second, 100, own_tokens=8)
    p.complete(p.schedule(0.0))  # the fork's chunk: request 1 has two live branches
    p.add(Sequence(2, 0.0, prompt_tokens=4, output_tokens=4), 0.0)
    plans = []
    while (plan := p.schedule(0.0)) is not None:
        plans.append(plan)
        p.complete(plan)
    moves = [(i, m.owner) for i, plan in enumerate(plans) for m in plan.swapped_out]
    [(out_at, owner)] = moves
    assert owner == 1  # the newest request, with two branches; request 2 alone recomputes
    assert [s.request_id for s in plans[1].preempted] == [2]
    [back_at] = [i for i, plan in enumerate(plans) if plan.swapped_in]
    assert back_at > out_at + 1
    # Request 2 waits while request 1 is away, though blocks are free, and comes after it.
    assert all(not plan.prefills for plan in plans[out_at:back_at])
    assert [c.seq.request_id for c in plans[back_at].prefills] == [2]
    assert p.used_blocks == 0 and p.outstanding() == 0


@pytest.mark.parametrize(
    ("free", "running", "back"), [(5, True, False), (6, True, True), (4, False, True)]
)
def test_a_swapped_request_comes_back_above_the_watermark_while_others_run(
    free: int, running: bool, back: bool
) -> None:
    """200 blocks keep a watermark of 2 while anything runs; an idle device waives it. The
    request holds 4 blocks and its decodes need none new (11 cached tokens, 4-token blocks)."""
    p = policy(num_blocks=200, swap_blocks=100)
    if running:
        p.add(Sequence(0, 0.0, prompt_tokens=8, output_tokens=50), 0.0)
        p.complete(p.schedule(0.0))
    root = Sequence(10, 0.0, 8, 20, generated=4, computed=11, blocks=3)
    child = Sequence(11, 0.0, 8, 20, generated=6, computed=11, blocks=1, owner=10, shared_blocks=2)
    group = p.groups[10] = BranchGroup.of(root)
    group.add(child, 10)
    p.swapped.append(SwappedRequest.of(10, [root, child], [], {}))
    p.swap_used = 4
    p.used_blocks = 200 - free
    p._swap_in()
    assert bool(p._moves_in) == back and (10 in p.running) == back
    assert p.used_blocks == 200 - free + (4 if back else 0) and p.swap_used == (0 if back else 4)


def test_thousands_of_forks_leave_no_reference_behind() -> None:
    torch = pytest.importorskip("torch")
    from real_backend.kv_cache import PagedKVCache

    rng = np.random.default_rng(11)
    trees = [random_tree(rng, max_children=8, max_len=16) for _ in range(600)]
    forks = sum(t.branches - 1 for t in trees)
    assert forks >= 2000
    p = policy(num_blocks=400, max_batch_size=32)
    cache = PagedKVCache(1, 400, 4, 1, 1, dtype=torch.float32)
    out = drive(p, trees, [6] * len(trees), cache)
    assert len(out.finished) == len(trees)
    assert sum(cache.allocator.refcount) == 0 and not cache.tables and p.used_blocks == 0
