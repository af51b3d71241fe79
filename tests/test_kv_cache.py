"""Paged KV cache: random operation sequences keep the allocator and every sequence's data sound."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kernels.paged_attention import write_kv  # noqa: E402
from real_backend.kv_cache import OutOfBlocks, PagedKVCache  # noqa: E402

N_LAYERS, NUM_BLOCKS, BLOCK = 2, 12, 4


class CacheMachine(RuleBasedStateMachine):
    """Shadow model: each sequence's list of token values; the cache must read them back."""

    @initialize()
    def setup(self):
        self.cache = PagedKVCache(N_LAYERS, NUM_BLOCKS, BLOCK, n_kv_heads=1, head_dim=2)
        self.shadow: dict[int, list[float]] = {}
        self.next_id = 0
        self.next_value = 1.0
        self.swapped: list[tuple[object, dict[int, list[float]]]] = []  # (handle, shadow)

    def _write(self, seq: int, slots: list[int]) -> None:
        values = [self.next_value + i for i in range(len(slots))]
        self.next_value += len(slots)
        kv = torch.tensor(values).view(-1, 1, 1).expand(-1, 1, 2)  # (n, n_kv, hd)
        for layer in range(N_LAYERS):
            write_kv(
                self.cache.k[layer],
                self.cache.v[layer],
                kv + layer,
                -kv,
                torch.tensor(slots, dtype=torch.long),
            )
        self.shadow[seq].extend(values)

    @rule(n=st.integers(0, 9))
    def new_sequence(self, n):
        seq = self.next_id
        self.next_id += 1
        try:
            slots = self.cache.allocate(seq, n)
        except OutOfBlocks:
            assert seq not in self.cache.tables
            return
        self.shadow[seq] = []
        self._write(seq, slots)

    @precondition(lambda self: self.shadow)
    @rule(data=st.data(), n=st.integers(1, 6))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.shadow)))
        before = (list(self.cache.tables[seq]), self.cache.num_free_blocks)
        try:
            slots = self.cache.append_slots(seq, n)
        except OutOfBlocks:
            assert (self.cache.tables[seq], self.cache.num_free_blocks) == before
            return
        self._write(seq, slots)

    @precondition(lambda self: self.shadow)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.shadow)))
        child = self.next_id
        self.next_id += 1
        self.cache.fork(parent, child)
        self.shadow[child] = list(self.shadow[parent])

    @precondition(lambda self: self.shadow)
    @rule(data=st.data())
    def truncate(self, data):
        seq = data.draw(st.sampled_from(sorted(self.shadow)))
        n = data.draw(st.integers(0, len(self.shadow[seq])))
        self.cache.truncate(seq, n)
        del self.shadow[seq][n:]

    @precondition(lambda self: self.shadow)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.shadow)))
        self.cache.free(seq)
        del self.shadow[seq]

    @precondition(lambda self: self.shadow)
    @rule(data=st.data())
    def swap_out(self, data):
        """A sequence and every one sharing a block with it, transitively, go to the host."""
        group = {data.draw(st.sampled_from(sorted(self.shadow)))}
        while True:
            blocks = {b for s in group for b in self.cache.tables[s]}
            wider = {s for s, t in self.cache.tables.items() if blocks & set(t)} | group
            if wider == group:
                break
            group = wider
        handle = self.cache.swap_out(sorted(group))
        assert handle.num_blocks == len(blocks)  # each shared block once
        self.swapped.append((handle, {s: self.shadow.pop(s) for s in group}))

    @precondition(lambda self: self.swapped)
    @rule(data=st.data())
    def swap_in(self, data):
        handle, shadow = self.swapped[data.draw(st.integers(0, len(self.swapped) - 1))]
        before = (dict(self.cache.tables), self.cache.num_free_blocks)
        try:
            self.cache.swap_in(handle)
        except OutOfBlocks:
            assert (dict(self.cache.tables), self.cache.num_free_blocks) == before
            return
        self.swapped.remove((handle, shadow))
        self.shadow.update(shadow)

    @invariant()
    def no_leak_and_refcounts_match(self):
        held = Counter(b for table in self.cache.tables.values() for b in table)
        assert self.cache.num_free_blocks + len(held) == NUM_BLOCKS
        for block in range(NUM_BLOCKS):
            assert self.cache.allocator.refcount[block] == held.get(block, 0)
        for seq, table in self.cache.tables.items():
            assert len(table) == -(-self.cache.length(seq) // BLOCK)

    @invariant()
    def every_sequence_reads_its_own_tokens(self):
        for seq, values in self.shadow.items():
            assert self.cache.length(seq) == len(values)
            for pos, value in enumerate(values):
                slot = self.cache.slot(seq, pos)
                for layer in range(N_LAYERS):
                    k = self.cache.k[layer].view(-1, 1, 2)[slot]
                    v = self.cache.v[layer].view(-1, 1, 2)[slot]
                    assert float(k[0, 0]) == value + layer and float(v[0, 1]) == -value


CacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestCacheMachine = CacheMachine.TestCase


def test_fork_shares_prefix_and_cow_leaves_parent_untouched():
    cache = PagedKVCache(1, 8, 4, n_kv_heads=1, head_dim=1)
    slots = cache.allocate("p", 6)  # blocks: one full, one with 2 of 4 filled
    kv = torch.arange(1.0, 7.0).view(6, 1, 1)
    write_kv(cache.k[0], cache.v[0], kv, kv, torch.tensor(slots))
    cache.fork("p", "c")
    assert cache.tables["c"] == cache.tables["p"]
    assert all(cache.allocator.refcount[b] == 2 for b in cache.tables["p"])
    (child_slot,) = cache.append_slots("c", 1)
    assert cache.tables["c"][0] == cache.tables["p"][0]  # full block still shared
    assert cache.tables["c"][1] != cache.tables["p"][1]  # partial block copied
    write_kv(
        cache.k[0], cache.v[0], torch.full((1, 1, 1), 99.0), kv[:1], torch.tensor([child_slot])
    )
    parent_block = cache.tables["p"][1]
    assert cache.k[0, parent_block, :, 0, 0].tolist()[:2] == [5.0, 6.0]
    assert float(cache.k[0, parent_block, 2, 0, 0]) == 0.0  # parent's next slot untouched
    child = [float(cache.k[0].view(-1, 1, 1)[cache.slot("c", p)]) for p in range(7)]
    assert child == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 99.0]
    cache.free("p")
    cache.free("c")
    assert cache.num_free_blocks == 8


def test_keep_refuses_to_move_tokens_into_a_shared_block():
    """`keep` with a start before the step's writes would overwrite a block the sequence
    shares with a fork: it raises before changing anything."""
    cache = PagedKVCache(1, 8, 4, n_kv_heads=1, head_dim=1)
    slots = cache.allocate("p", 6)  # block 0 full, block 1 half
    kv = torch.arange(1.0, 7.0).view(6, 1, 1)
    write_kv(cache.k[0], cache.v[0], kv, kv, torch.tensor(slots))
    cache.fork("p", "c")  # both blocks shared
    k, tables = cache.k.clone(), {s: list(t) for s, t in cache.tables.items()}
    with pytest.raises(ValueError, match="shared"):
        cache.keep("p", 2, [0, 2])  # would move position 4 to 3, inside shared block 0
    assert torch.equal(cache.k, k) and cache.tables == tables and cache.length("p") == 6
    child = [float(cache.k[0].view(-1, 1, 1)[cache.slot("c", p)]) for p in range(6)]
    assert child == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_swap_out_refuses_a_block_shared_beyond_the_group():
    cache = PagedKVCache(1, 8, 4, n_kv_heads=1, head_dim=1)
    cache.allocate("p", 6)
    cache.fork("p", "c")
    tables = {s: list(t) for s, t in cache.tables.items()}
    with pytest.raises(ValueError, match="shared beyond"):
        cache.swap_out(["c"])
    assert cache.tables == tables and cache.num_free_blocks == 6
    swapped = cache.swap_out(["p", "c"])
    assert swapped.num_blocks == 2 and cache.num_free_blocks == 8 and not cache.tables


def test_swap_space_in_blocks_of_the_cache():
    from real_backend.serve import swap_blocks
    from workbench.scenario.kv_cache import KVCacheConfig

    cache = PagedKVCache(2, 8, 4, n_kv_heads=1, head_dim=2)  # fp32
    assert cache.block_bytes == 2 * 2 * 4 * 1 * 2 * 4  # K and V x layers x tokens x heads x dim
    assert swap_blocks(KVCacheConfig(swap_space_gib=1), cache) == (1 << 30) // 128
    assert swap_blocks(KVCacheConfig(swap_space_gib=0), cache) == 0
