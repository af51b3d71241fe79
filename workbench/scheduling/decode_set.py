"""The decode set: running sequences that emit one token per step, advanced lazily.

Every engine step of a continuous-batching replica includes every sequence of its decode
set, so a member's progress is a function of the replica's step counter `D`: after entering
at `entry_step` with `entry_computed` cached tokens, it has `entry_computed + D - entry_step`.
Aggregates (size, context sum and longest context, block demand per step, next finish) are
kept incrementally, so advancing by any number of steps is O(block_size), not O(batch) per
step.

A multi-token decoder (speculative, lookahead) writes up to `1 + lookahead_slots` KV entries
per member and step, and a member may emit extra tokens (`advance`). Each member then holds
blocks for its cached tokens plus `lookahead_slots`, so the step's writes always fit.

A branch (APAR) shares its parent's full prefix blocks (`Sequence.shared_blocks`), which
the parent is charged for: the branch holds the rest. It needs a new block at the same step
counters as any sequence of its length (its residue), so block demand is unchanged.
"""

from __future__ import annotations

import heapq

import numpy as np

from workbench.scheduling.blocks import blocks_for, decode_block_demand
from workbench.scheduling.sequence import Sequence


class DecodeSet:
    def __init__(self, block_size: int, lookahead_slots: int = 0) -> None:
        self.block_size = block_size
        self.lookahead_slots = lookahead_slots
        self.members: dict[int, Sequence] = {}
        self.residue_counts = np.zeros(block_size, dtype=np.int64)  # (block_size,)
        self._offset_sum = 0  # Σ (entry_computed − entry_step)
        self._finish_heap: list[tuple[int, int]] = []  # (step counter after last step, id)
        # (−offset, id), offset = entry_computed − entry_step: the longest member on top;
        # entries of departed members, or of an offset since moved by `advance`, go stale.
        self._offset_heap: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.members)

    def add(self, seq: Sequence, step: int) -> int:
        """`seq` has just emitted; it decodes from replica step `step` on. Returns the blocks
        it needs beyond `seq.blocks` for its lookahead slots."""
        seq.entry_step = step
        seq.entry_computed = seq.computed
        seq.entry_generated = seq.generated
        self.members[seq.request_id] = seq
        self.residue_counts[self.residue(seq)] += 1
        self._offset_sum += seq.computed - step
        heapq.heappush(self._offset_heap, (step - seq.computed, seq.request_id))
        finish_at = step + seq.output_tokens - seq.generated
        heapq.heappush(self._finish_heap, (finish_at, seq.request_id))
        return self._held_blocks(seq, seq.computed) - seq.blocks

    def advance(self, seq: Sequence, step: int, extra: int) -> int:
        """At counter `step`, `seq` emitted (and cached) `extra` tokens beyond the step's one;
        returns the new blocks it needs to keep its lookahead slots."""
        before = self._held_blocks(seq, seq.entry_computed + step - seq.entry_step)
        self.residue_counts[self.residue(seq)] -= 1
        seq.entry_computed += extra
        seq.entry_generated += extra
        self.residue_counts[self.residue(seq)] += 1
        self._offset_sum += extra
        heapq.heappush(self._offset_heap, (seq.entry_step - seq.entry_computed, seq.request_id))
        finish_at = seq.entry_step + seq.output_tokens - seq.entry_generated
        heapq.heappush(self._finish_heap, (finish_at, seq.request_id))  # the old entry goes stale
        return self._held_blocks(seq, seq.entry_computed + step - seq.entry_step) - before

    def residue(self, seq: Sequence) -> int:
        """Step counters (mod block size) at which `seq` needs a new block: its next write
        (cached tokens + lookahead slots) starts a block."""
        return (seq.entry_step - seq.entry_computed - self.lookahead_slots) % self.block_size

    def _held_blocks(self, seq: Sequence, computed: int) -> int:
        return blocks_for(computed + self.lookahead_slots, self.block_size) - seq.shared_blocks

    def remove(self, seq: Sequence, step: int) -> None:
        """Take `seq` out at counter `step`, writing back its exact progress and blocks."""
        self.sync(seq, step)
        del self.members[seq.request_id]
        self.residue_counts[self.residue(seq)] -= 1
        self._offset_sum -= seq.entry_computed - seq.entry_step
        seq.entry_step = -1  # heap entries of departed members are skipped lazily

    def sync(self, seq: Sequence, step: int) -> None:
        advanced = step - seq.entry_step
        seq.computed = seq.entry_computed + advanced
        seq.generated = seq.entry_generated + advanced
        seq.blocks = self._held_blocks(seq, seq.computed)

    def context_sum(self, step: int) -> int:
        """Σ KV length including the new token, for the step run at counter `step`."""
        return self._offset_sum + len(self.members) * (step + 1)

    def context_max(self, step: int) -> int:
        """The longest member's KV length including the new token, at counter `step` (0 when
        empty). Stale heap entries (a member gone, or its offset moved) are dropped here."""
        heap, members = self._offset_heap, self.members
        while heap:
            negative_offset, request_id = heap[0]
            seq = members.get(request_id)
            if seq is not None and seq.entry_step - seq.entry_computed == negative_offset:
                return step + 1 - negative_offset
            heapq.heappop(heap)
        return 0

    def block_demand_at(self, step: int) -> int:
        """New blocks needed by the one step run at counter `step`."""
        return int(self.residue_counts[step % self.block_size])

    def block_demand(self, step: int, n_steps: int) -> np.ndarray:
        """New blocks needed by each of the next `n_steps` steps from counter `step`."""
        return decode_block_demand(self.residue_counts, step, n_steps)

    def steps_to_next_finish(self, step: int) -> int | None:
        """Steps (from counter `step`) until the first member reaches its output length."""
        heap = self._finish_heap
        while heap and self._stale(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] - step if heap else None

    def pop_finished(self, step: int) -> list[Sequence]:
        """Members whose last token was emitted by the step that brought the counter to `step`."""
        done: list[Sequence] = []
        heap = self._finish_heap
        while heap and (self._stale(heap[0]) or heap[0][0] <= step):
            finish_at, request_id = heapq.heappop(heap)
            if self._stale((finish_at, request_id)):
                continue
            seq = self.members[request_id]
            self.remove(seq, step)
            done.append(seq)
        return done

    def _stale(self, entry: tuple[int, int]) -> bool:
        seq = self.members.get(entry[1])
        if seq is None:
            return True
        return entry[0] != seq.entry_step + seq.output_tokens - seq.entry_generated
