"""Paged KV cache: fixed-size blocks, per-sequence block tables, reference counts.

A sequence is a list of block ids and a length (tokens written). ``fork`` shares every block of
the parent with the child (refcount + 1). Before a sequence writes into a block that another
table also holds (a shared, partly filled last block), that block is copied (copy-on-write), so
neither side ever sees the other's new tokens. ``truncate`` rolls a sequence back (rejected
speculative tokens) and frees the whole blocks past the new length. A block returns to the free
list only when no table holds it.

Memory: ``k``/``v`` are ``(n_layers, num_blocks, block_size, n_kv_heads, head_dim)``; layer
``l``'s cache ``k[l]`` is what ``kernels.paged_attention`` takes.

``swap_out`` moves a group of sequences (an APAR request's branches) to host memory, each
shared block once, and frees their blocks; ``swap_in`` brings them back into fresh blocks
with the same sharing, so nothing is recomputed.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import torch

from kernels.dispatch import CopyBlocks
from kernels.paged_attention import copy_blocks as reference_copy_blocks
from real_backend.host_to_device import aligned_rows, device_tensor

SeqId = Hashable


class OutOfBlocks(RuntimeError):
    """The pool has too few free blocks for the request; nothing was changed."""


@dataclass(eq=False)  # tensors: compared by identity
class SwappedBlocks:
    """A group of sequences' blocks in host memory: each distinct block once."""

    k: torch.Tensor  # (n_layers, n_blocks, block_size, n_kv_heads, head_dim), on the host
    v: torch.Tensor  # (n_layers, n_blocks, block_size, n_kv_heads, head_dim)
    tables: dict[SeqId, list[int]]  # per sequence, indices into the swapped blocks
    lengths: dict[SeqId, int]

    @property
    def num_blocks(self) -> int:
        return self.k.shape[1]


class BlockAllocator:
    """Free list and reference counts of ``num_blocks`` block ids."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.refcount = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # pop() hands out low ids first

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise OutOfBlocks("no free KV-cache block")
        block = self._free.pop()
        self.refcount[block] = 1
        return block

    def incref(self, block: int) -> None:
        assert self.refcount[block] > 0, f"block {block} is free"
        self.refcount[block] += 1

    def decref(self, block: int) -> None:
        assert self.refcount[block] > 0, f"block {block} is already free"
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self._free.append(block)


class PagedKVCache:
    """K/V storage for all layers plus the block tables of the live sequences."""

    def __init__(
        self,
        n_layers: int,
        num_blocks: int,
        block_size: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        copy_blocks: CopyBlocks = reference_copy_blocks,  # the kernel set's, on CUDA
    ):
        shape = (n_layers, num_blocks, block_size, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.copy_blocks = copy_blocks
        self.allocator = BlockAllocator(num_blocks)
        self.tables: dict[SeqId, list[int]] = {}
        self.lengths: dict[SeqId, int] = {}

    # -- queries ---------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return self.k.shape[0]

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes over every layer, K and V."""
        return 2 * self.k[:, 0].numel() * self.k.element_size()

    @property
    def num_free_blocks(self) -> int:
        return self.allocator.num_free

    def length(self, seq: SeqId) -> int:
        return self.lengths[seq]

    def slot(self, seq: SeqId, position: int) -> int:
        """Flat slot of token ``position`` of ``seq``."""
        block = self.tables[seq][position // self.block_size]
        return block * self.block_size + position % self.block_size

    def slots(self, seq: SeqId, start: int, n: int) -> list[int]:
        """Flat slots of tokens ``start .. start + n - 1`` of ``seq``."""
        table, bs = self.tables[seq], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, start + n)]

    def block_tables(self, seqs: Iterable[SeqId]) -> torch.Tensor:
        """``(B, max_blocks)`` int64, padded with -1."""
        rows = [self.tables[s] for s in seqs]
        width = max((len(r) for r in rows), default=0) or 1
        padded = [[*row, *[-1] * (width - len(row))] for row in rows]
        return device_tensor(padded, self.k.device).view(len(rows), width)

    # -- sequence lifecycle ----------------------------------------------------------------
    def allocate(self, seq: SeqId, n_tokens: int = 0) -> list[int]:
        """Start a new sequence with ``n_tokens`` reserved slots; return their flat slots."""
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already exists")
        self.tables[seq] = []
        self.lengths[seq] = 0
        try:
            return self.append_slots(seq, n_tokens)
        except OutOfBlocks:
            del self.tables[seq], self.lengths[seq]
            raise

    def append_slots(self, seq: SeqId, n_tokens: int) -> list[int]:
        """Reserve the next ``n_tokens`` positions of ``seq`` and return their flat slots.

        Copies the last block first when it is partly filled and shared (copy-on-write), and
        allocates new blocks as needed. All-or-nothing: raises OutOfBlocks before any change.
        """
        table, length, bs = self.tables[seq], self.lengths[seq], self.block_size
        if n_tokens <= 0:
            return []
        needs_cow = length % bs != 0 and self.allocator.refcount[table[-1]] > 1
        new_blocks = -(-(length + n_tokens) // bs) - len(table)
        if new_blocks + needs_cow > self.allocator.num_free:
            raise OutOfBlocks(
                f"sequence {seq!r} needs {new_blocks + needs_cow} blocks, "
                f"{self.allocator.num_free} free"
            )
        if needs_cow:
            self._copy_on_write(seq)
        for _ in range(new_blocks):
            table.append(self.allocator.allocate())
        self.lengths[seq] = length + n_tokens
        return self.slots(seq, length, n_tokens)

    def fork(self, parent: SeqId, child: SeqId) -> SeqId:
        """New sequence ``child`` sharing all of ``parent``'s blocks (its whole prefix)."""
        if child in self.tables:
            raise ValueError(f"sequence {child!r} already exists")
        table = self.tables[parent]
        for block in table:
            self.allocator.incref(block)
        self.tables[child] = list(table)
        self.lengths[child] = self.lengths[parent]
        return child

    def truncate(self, seq: SeqId, n_tokens: int) -> None:
        """Roll ``seq`` back to its first ``n_tokens`` tokens; free the blocks past them."""
        if not 0 <= n_tokens <= self.lengths[seq]:
            raise ValueError(f"cannot truncate {seq!r} of length {self.lengths[seq]} to {n_tokens}")
        table = self.tables[seq]
        keep = -(-n_tokens // self.block_size)
        for block in table[keep:]:
            self.allocator.decref(block)
        del table[keep:]
        self.lengths[seq] = n_tokens

    def keep(self, seq: SeqId, start: int, offsets: list[int]) -> None:
        """Keep only the tokens ``start + offsets[j]`` after ``start``, moved to ``start + j``:
        an accepted tree path becomes a contiguous prefix; the rest is rolled back.

        ``offsets`` must be increasing, so every move goes to an earlier (or the same) slot.
        ``start`` must be where this step's writes begin: the moved-into blocks were written
        this step, hence private (copied on write); a block shared with a fork is refused.
        """
        if any(b <= a for a, b in itertools.pairwise(offsets)) or (
            offsets and (offsets[0] < 0 or start + offsets[-1] >= self.lengths[seq])
        ):
            raise ValueError(f"offsets must increase within {seq!r}'s new tokens: {offsets}")
        moves = [(start + j, start + o) for j, o in enumerate(offsets) if o != j]
        self._check_private(seq, start, [d for d, _ in moves])
        if moves:
            slots = [[self.slot(seq, d) for d, _ in moves], [self.slot(seq, s) for _, s in moves]]
            dst, src = device_tensor(slots, self.k.device)  # (n,) each
            for cache in (self.k, self.v):
                flat = cache.view(cache.shape[0], -1, *cache.shape[3:])  # (L, slots, n_kv, hd)
                flat[:, dst] = flat[:, src]
        self.truncate(seq, start + len(offsets))

    def free(self, seq: SeqId) -> None:
        """Drop ``seq``; its blocks return to the pool once no other sequence holds them."""
        for block in self.tables.pop(seq):
            self.allocator.decref(block)
        del self.lengths[seq]

    def swap_out(self, seqs: Iterable[SeqId]) -> SwappedBlocks:
        """Copy ``seqs``' blocks to host memory (a block they share, once) and free them there.

        Their blocks must not be shared with any other sequence: they move as a whole.
        """
        seqs = list(seqs)
        distinct = list(dict.fromkeys(b for s in seqs for b in self.tables[s]))
        holders = {b: 0 for b in distinct}
        for s in seqs:
            for block in self.tables[s]:
                holders[block] += 1
        outside = [b for b in distinct if self.allocator.refcount[b] != holders[b]]
        if outside:
            raise ValueError(f"blocks {outside} are shared beyond the swapped sequences")
        position = {b: i for i, b in enumerate(distinct)}
        index = torch.tensor(distinct, dtype=torch.long, device=self.k.device)  # (n,)
        swapped = SwappedBlocks(
            k=self.k.index_select(1, index).to("cpu"),  # (L, n, bs, n_kv, hd)
            v=self.v.index_select(1, index).to("cpu"),
            tables={s: [position[b] for b in self.tables[s]] for s in seqs},
            lengths={s: self.lengths[s] for s in seqs},
        )
        for s in seqs:
            self.free(s)
        return swapped

    def swap_in(self, swapped: SwappedBlocks) -> None:
        """Bring swapped sequences back into fresh blocks, shared as they were.
        All-or-nothing: raises OutOfBlocks before any change."""
        if swapped.num_blocks > self.allocator.num_free:
            raise OutOfBlocks(
                f"swapping in needs {swapped.num_blocks} blocks, {self.allocator.num_free} free"
            )
        clash = [s for s in swapped.tables if s in self.tables]
        if clash:
            raise ValueError(f"sequences {clash} already exist")
        fresh = [self.allocator.allocate() for _ in range(swapped.num_blocks)]
        index = torch.tensor(fresh, dtype=torch.long, device=self.k.device)  # (n,)
        self.k.index_copy_(1, index, swapped.k.to(self.k.device))
        self.v.index_copy_(1, index, swapped.v.to(self.v.device))
        for s, table in swapped.tables.items():
            self.tables[s] = [fresh[i] for i in table]
            self.lengths[s] = swapped.lengths[s]
        for block, holders in Counter(b for t in swapped.tables.values() for b in t).items():
            for _ in range(holders - 1):
                self.allocator.incref(fresh[block])

    # -- internals -------------------------------------------------------------------------
    def _check_private(self, seq: SeqId, start: int, positions: list[int]) -> None:
        """Refuse writes into blocks another sequence also holds (before anything changes)."""
        for position in positions:
            block = self.tables[seq][position // self.block_size]
            if self.allocator.refcount[block] > 1:
                raise ValueError(
                    f"keep({seq!r}, start={start}) would move a token into position {position}, "
                    f"in block {block} shared by {self.allocator.refcount[block]} sequences: "
                    "start must be where this step's writes begin"
                )

    def _copy_on_write(self, seq: SeqId) -> None:
        table = self.tables[seq]
        old = table[-1]
        new = self.allocator.allocate()
        self._copy_block_all_layers(old, new)
        self.allocator.decref(old)
        table[-1] = new

    def _copy_block_all_layers(self, old: int, new: int) -> None:
        """Block `old` -> `new` in every layer with one copy call: the layers' caches viewed
        as one pool of n_layers x num_blocks blocks (layer l's block b is l * num_blocks + b)."""
        n_layers, num_blocks = self.k.shape[:2]
        ids = [[layer * num_blocks + b for layer in range(n_layers)] for b in (old, new)]
        src, dst = aligned_rows(ids, self.k.device)  # (n_layers,) each

        def pool(cache: torch.Tensor) -> torch.Tensor:
            return cache.view(n_layers * num_blocks, *cache.shape[2:])  # (L * blocks, bs, n_kv, hd)

        self.copy_blocks(pool(self.k), pool(self.v), src, dst)
