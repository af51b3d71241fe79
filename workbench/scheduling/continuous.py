"""vLLM-style continuous batching with a paged KV budget, optionally with chunked prefill.

Each step schedules, in order: every running decode (one token each), the running
sequences still prefilling (chunks, when chunked prefill is on), then waiting requests in
FCFS order while the batch size, the step's token budget and the KV blocks allow. When a
running sequence cannot get the blocks it needs, the most recently admitted running
sequence is preempted by recompute: its blocks are freed and it goes back to the front
of the queue (vLLM's default). Without chunked prefill a prompt is computed in one step;
with it (Sarathi-Serve) the step's token budget is `chunk_size`, decodes first, and a
prompt takes its blocks chunk by chunk (vLLM V1) or all at admission (`whole_prompt_blocks`:
vLLM V0, Vidur's Sarathi).

A multi-token decoder (speculative, lookahead) sets `lookahead_slots`: each decode then
computes up to `1 + lookahead_slots` tokens, holds KV room for them, and may emit extra
tokens (`complete(..., extra=...)`), so no step is repeatable in bulk.

With `branching` (APAR) a running sequence may `fork` a branch after a step: a sequence of
its own that shares the parent's cached prefix (`branches.py` has the rules for blocks,
releases and preemption). Forks are admitted before waiting requests, without the
admission watermark; steps are planned one at a time, since a fork may follow any step.
With `swap_blocks` of host memory, a request preempted while it has several live branches,
all of them on the device, is swapped out instead (vLLM's rule: a group of several running
sequences is swapped, a single sequence recomputed); swapped requests come back, oldest
first, before any waiting request is admitted (without chunked prefill, none is while any is
swapped).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping

import numpy as np

from workbench.scheduling.blocks import blocks_for, steps_within_budget
from workbench.scheduling.branches import BranchGroup
from workbench.scheduling.decode_set import DecodeSet
from workbench.scheduling.plan import PrefillChunk, StepPlan, StepResult, SwapMove
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.sequence import Sequence
from workbench.scheduling.swap_space import SwappedRequest
from workbench.scheduling.waiting_queue import FcfsQueue, WaitingQueue

# vLLM keeps 1% of blocks free when admitting, so a new prompt does not immediately force
# a preemption of the sequences already running.
WATERMARK = 0.01


class ContinuousBatching(BatchPolicy):
    def __init__(
        self,
        *,
        num_blocks: int,
        block_size: int,
        max_batch_size: int,
        max_batched_tokens: int,
        chunked_prefill: bool = False,
        chunk_size: int = 512,
        lookahead_slots: int = 0,
        waiting: WaitingQueue | None = None,
        whole_prompt_blocks: bool = False,
        branching: bool = False,
        swap_blocks: int = 0,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_batch_size = max_batch_size
        self.chunked_prefill = chunked_prefill
        self.token_budget = (
            min(chunk_size, max_batched_tokens) if chunked_prefill else max_batched_tokens
        )
        self.watermark_blocks = int(WATERMARK * num_blocks)
        self.step = 0
        self.used_blocks = 0
        self._decode_reserved_step = -1  # step whose decode blocks are already allocated
        self.waiting: WaitingQueue = FcfsQueue() if waiting is None else waiting  # admission order
        self.running: dict[int, Sequence] = {}  # admission order; decode members included
        self.prefilling: dict[int, Sequence] = {}  # running, prompt not yet fully computed
        self.lookahead_slots = lookahead_slots
        self.whole_prompt_blocks = whole_prompt_blocks  # blocks of the whole prompt at admission
        self.decoding = DecodeSet(block_size, lookahead_slots)
        self.branching = branching  # sequences may fork (APAR): one step per plan
        self.groups: dict[int, BranchGroup] = {}  # owner → its branches, once it forked
        self.forks: deque[Sequence] = deque()  # forks waiting for admission, oldest first
        self._waiting_branches = 0  # preempted branches in `waiting` (not requests)
        self._released: list[int] = []  # ended branches released while planning this step
        self.swap_blocks = swap_blocks  # host memory for swapped requests, in KV blocks
        self.swap_used = 0
        self.swapped: deque[SwappedRequest] = deque()  # swapped out, oldest first
        self.swap_outs = 0  # requests swapped out so far
        self.swaps_refused = 0  # swappable requests recomputed: the host memory was full
        self.swaps_recomputed = 0  # swapped requests recomputed: too big to come back
        self.swapped_blocks = 0  # blocks moved to and from host memory, both ways
        self._moves_out: list[SwapMove] = []  # swapped out while planning this step
        self._moves_in: list[SwapMove] = []  # swapped back in while planning this step
        self._given_up: list[Sequence] = []  # swapped requests' branches sent to recompute
        self._dropped: list[int] = []  # requests whose host copy is discarded this step

    # ------------------------------------------------------------------ engine interface

    def add(self, seq: Sequence, now: float) -> None:
        self.waiting.append(seq)

    def outstanding(self) -> int:
        sequences = len(self.waiting) + len(self.forks) + len(self.running)
        sequences += sum(len(r.running) + len(r.forks) for r in self.swapped)
        return sequences - sum(len(g.live) - 1 for g in self.groups.values())

    def queued(self) -> int:
        return len(self.waiting) - self._waiting_branches

    def decode_sequences(self) -> list[Sequence]:
        return list(self.decoding.members.values())

    def schedule(self, now: float) -> StepPlan | None:
        self.waiting.set_time(now)
        self._released = []
        self._moves_out, self._moves_in, self._given_up, self._dropped = [], [], [], []
        preempted = self._reserve_decode_blocks()
        if not preempted or not self.running:
            self._swap_in()
        budget = self.token_budget - len(self.decoding) * (1 + self.lookahead_slots)
        chunks, budget = self._continue_prefills(budget, preempted)
        # As vLLM: a step that preempted admits nobody, or victims thrash; unless it preempted
        # everything (a request's branches can be all that ran).
        if not preempted or not self.running:
            chunks += self._admit(budget)
        if not chunks and not self.decoding:
            chunks = self._unblock(budget)  # nothing decodes: the whole budget is free
        if not chunks and not self.decoding:
            return None  # preemptions only happen to make room for running sequences
        return self._plan(chunks, preempted)

    def complete(
        self,
        plan: StepPlan,
        n_steps: int = 1,
        stopped: Collection[int] = (),
        extra: Mapping[int, int] | None = None,
    ) -> StepResult:
        if n_steps > 1:
            demand = self.decoding.block_demand(plan.step + 1, n_steps - 1)
            self.used_blocks += int(demand.sum())
        self.step += n_steps
        started, ended = self._finish_prefills(plan.prefills)
        for request_id, tokens in (extra or {}).items():
            # May overdraw the budget until the next `schedule` preempts: the physical cache
            # only ever holds what the step reserved, the overdraw is next step's headroom.
            self.used_blocks += self.decoding.advance(
                self.decoding.members[request_id], self.step, tokens
            )
        ended += self.decoding.pop_finished(self.step)
        ended += self._stop_early(stopped)
        result = StepResult(started=started, finished=[])
        for seq in ended:
            if seq.owner in self.groups:
                result.branches_ended.append(seq)
            request = self._release(seq, result.released)
            if request is not None:
                result.finished.append(request)
        return result

    def fork(self, parent: Sequence, child_id: int, own_tokens: int) -> Sequence:
        """`parent` emitted a fork token in the step just completed: start a branch.

        The child sees the parent's context (prompt and generated tokens, the fork token
        the newest) plus a child token. It shares the parent's cached prefix, so its first
        step computes just those two tokens: the fork token is not cached yet (a sequence's
        newest token never is). It waits before every waiting request and is admitted like
        one but without the watermark, which is kept for it: a fork is deferred, never
        refused, while batch slots, the token budget or blocks are short.
        child_id: unique among the replica's sequences. own_tokens: the child's length stop,
        in tokens of its own (after the child token).
        """
        if parent.request_id not in self.running or parent.request_id in self.prefilling:
            raise ValueError(f"sequence {parent.request_id} is not decoding: it cannot fork")
        if parent.request_id in self.decoding.members:
            self.decoding.sync(parent, self.step)
        if own_tokens < 1:
            raise ValueError("a branch emits at least one token of its own")
        generated = parent.generated + 1  # the child token follows the fork token
        child = Sequence(
            request_id=child_id,
            arrival_s=parent.arrival_s,
            prompt_tokens=parent.prompt_tokens,
            output_tokens=generated + own_tokens,
            generated=generated,
            computed=parent.computed,
            owner=parent.owner,
            parent_id=parent.request_id,
            shared_blocks=parent.computed // self.block_size,
            branch_start=generated,
        )
        group = self.groups.get(parent.owner)
        if group is None:
            group = self.groups[parent.owner] = BranchGroup.of(parent)
        group.add(child, parent.request_id)
        self.forks.append(child)
        return child

    # ------------------------------------------------------------------ planning

    def _reserve_decode_blocks(self) -> list[Sequence]:
        """Allocate this step's decode blocks, preempting the newest sequences if short."""
        preempted: list[Sequence] = []
        need = self.decoding.block_demand_at(self.step)
        # A multi-token step may have overdrawn the budget (`complete`); with nothing left to
        # preempt, held branches are the ones to go (`_unblock`, when admission stalls).
        while need > self.free_blocks() and self.running:
            preempted += self._preempt_newest()
            need = self.decoding.block_demand_at(self.step)
        self.used_blocks += need
        self._decode_reserved_step = self.step
        return preempted

    def _continue_prefills(
        self, budget: int, preempted: list[Sequence]
    ) -> tuple[list[PrefillChunk], int]:
        chunks: list[PrefillChunk] = []
        for seq in list(self.prefilling.values()):
            if seq.request_id not in self.prefilling:
                continue  # preempted while making room for an older one
            if budget <= 0:
                break
            tokens = min(seq.prefill_remaining, budget)
            if not self._grow(seq, tokens, preempted):
                break
            chunks.append(PrefillChunk(seq, tokens, seq.computed))
            budget -= tokens
        return chunks, budget

    def _admit(self, budget: int) -> list[PrefillChunk]:
        chunks: list[PrefillChunk] = []
        while len(self.running) < self.max_batch_size and budget > 0:
            seq = self._waiting_head()
            if seq is None:
                break
            tokens = seq.prefill_remaining
            if self.chunked_prefill:
                tokens = min(tokens, budget)
            elif tokens > budget:
                break
            reserved = seq.prefill_remaining if self.whole_prompt_blocks else tokens
            # A fork's shared prefix is its parent's; fresh sequences compute from zero.
            need = blocks_for(seq.computed + reserved, self.block_size) - seq.shared_blocks
            watermark = 0 if seq.parent_id >= 0 else self.watermark_blocks
            if self.free_blocks() - need < watermark:
                break
            self._pop_waiting()
            self.running[seq.request_id] = seq
            self.prefilling[seq.request_id] = seq
            seq.blocks = need
            self.used_blocks += need
            chunks.append(PrefillChunk(seq, tokens, seq.computed))
            budget -= tokens
        return chunks

    def _waiting_head(self) -> Sequence | None:
        """The next sequence to admit: waiting forks first, then the waiting queue. As in
        vLLM V0, the queue waits while a request is swapped out, unless prefills are chunked
        (its chunked-prefill scheduler admits prefills after the swapped requests' turn)."""
        if self.forks:
            return self.forks[0]
        if not self.waiting or (self.swapped and not self.chunked_prefill):
            return None
        return self.waiting.head()

    def _pop_waiting(self) -> None:
        if self.forks:
            self.forks.popleft()
        elif self.waiting.popleft().is_branch:
            self._waiting_branches -= 1

    def _grow(self, seq: Sequence, tokens: int, preempted: list[Sequence]) -> bool:
        """Give a prefilling `seq` blocks for `tokens` more; False if it was preempted."""
        held = blocks_for(seq.computed + tokens, self.block_size) - seq.shared_blocks
        need = max(held - seq.blocks, 0)
        while need > self.free_blocks():
            victims = self._preempt_newest()
            preempted += victims
            if any(victim is seq for victim in victims):
                return False
        seq.blocks += need
        self.used_blocks += need
        return True

    def _plan(self, chunks: list[PrefillChunk], preempted: list[Sequence]) -> StepPlan:
        size = len(self.decoding)
        single = chunks or preempted or self.lookahead_slots or self.branching
        repeat = 1 if single else self._repeatable_decode_steps()
        if repeat == 1:
            used = np.array([self.used_blocks])
        else:
            demand = self.decoding.block_demand(self.step + 1, repeat - 1)
            used = self.used_blocks + np.concatenate(([0], np.cumsum(demand)))  # (repeat,)
        plan = StepPlan(
            step=self.step,
            prefills=chunks,
            decode_batch_size=size,
            decode_context_sum=self.decoding.context_sum(self.step),
            decode_context_max=self.decoding.context_max(self.step),
            emitting=size + sum(c.tokens == c.seq.prefill_remaining for c in chunks),
            kv_blocks_used=used,
            preempted=self._recomputed(preempted),
            released=self._released,
            swap_dropped=self._dropped,
            swapped_out=self._moves_out,
            swapped_in=self._moves_in,
            repeatable_steps=repeat,
            replan_at_s=self._admission_changes_at_s() if repeat > 1 else None,
        )
        self.swapped_blocks += plan.swapped_blocks
        self.swap_outs += len(plan.swapped_out)
        return plan

    def _recomputed(self, preempted: list[Sequence]) -> list[Sequence]:
        """The sequences preempted by recompute: not those of a request in host memory, and a
        swapped request sent to recompute after all once, though it may have left in this
        very step."""
        away = {r.owner for r in self.swapped}
        out = {s.request_id: s for s in preempted if s.owner not in away}
        out.update((s.request_id, s) for s in self._given_up)
        return list(out.values())

    def _admission_changes_at_s(self) -> float | None:
        """When a blocked queue head may give way to another request with time alone (aging):
        a decode span must not run past it."""
        if not self.waiting or len(self.running) >= self.max_batch_size:
            return None
        return self.waiting.head_changes_at_s()

    def _repeatable_decode_steps(self) -> int:
        """Decode-only steps until a member finishes or the blocks run out.

        Waiting requests stay blocked meanwhile: batch size and token budget do not change,
        and free blocks only shrink while nothing finishes. The queue head itself may change
        with time (aging): the plan's `replan_at_s` bounds the span then.
        """
        to_finish = self.decoding.steps_to_next_finish(self.step)
        assert to_finish is not None and to_finish >= 1
        if to_finish == 1:
            return 1
        demand = self.decoding.block_demand(self.step + 1, to_finish - 1)
        return 1 + steps_within_budget(demand, self.free_blocks())

    # ------------------------------------------------------------------ state changes

    def _finish_prefills(self, chunks: list[PrefillChunk]) -> tuple[list[Sequence], list[Sequence]]:
        started: list[Sequence] = []
        finished: list[Sequence] = []
        for chunk in chunks:
            seq = chunk.seq
            seq.computed += chunk.tokens
            if seq.prefill_remaining > 0:
                continue
            del self.prefilling[seq.request_id]
            seq.generated += 1  # the step that completes a prefill emits the next token
            seq.first_emit_step = self.step - 1
            started.append(seq)
            if seq.generated >= seq.output_tokens:
                finished.append(seq)
            else:
                self.used_blocks += self.decoding.add(seq, self.step)
        return started, finished

    def _stop_early(self, stopped: Collection[int]) -> list[Sequence]:
        out: list[Sequence] = []
        for request_id in sorted(stopped):
            seq = self.decoding.members.get(request_id)
            if seq is not None:
                self.decoding.remove(seq, self.step)
                out.append(seq)
        return out

    def _release(self, seq: Sequence, released: list[int]) -> Sequence | None:
        """Take a sequence that ended out; returns the request that ends with it, if any
        (itself, or the root of its branches once the last one ended). Branches whose
        blocks are released go to `released`."""
        self._stop_running(seq)
        group = self.groups.get(seq.owner)
        if group is None:
            self.used_blocks -= seq.blocks
            seq.blocks = 0
            return seq
        # An ended branch keeps its cached tokens' blocks for its forks, not its headroom.
        cached = blocks_for(seq.computed, self.block_size) - seq.shared_blocks
        self.used_blocks -= seq.blocks - min(seq.blocks, cached)
        seq.blocks = min(seq.blocks, cached)
        for branch, blocks in group.end(seq):
            self.used_blocks -= blocks
            released.append(branch)
        seq.blocks = 0
        if group.live:
            return None
        assert not group.held, "a request ended with blocks still held"
        del self.groups[seq.owner]
        group.root.preemptions = group.preemptions
        return group.root

    def _stop_running(self, seq: Sequence) -> None:
        if seq.request_id in self.decoding.members:
            self.decoding.remove(seq, self.step)
        del self.running[seq.request_id]
        self.prefilling.pop(seq.request_id, None)

    def _preempt_newest(self) -> list[Sequence]:
        """Preempt the most recently admitted request: all its running branches."""
        if not self.groups:
            newest = next(reversed(self.running.values()))
            self._evict(newest)
            return [newest]
        owner = self._newest_owner()
        victims = [s for s in self.running.values() if s.owner == owner]
        if self._swappable(owner, victims):
            self._swap_out(owner, victims)
            return victims
        for victim in reversed(victims):  # they go back to the queue front in their order
            self._evict(victim)
        if owner in self.groups:
            self._preempt_group(owner)
        return victims

    def _preempt_group(self, owner: int) -> None:
        """The rest of a request's preemption once its running branches are evicted: the
        blocks its ended branches held go, and its waiting forks, their shared prefix gone,
        wait to recompute it like preempted branches."""
        group = self.groups[owner]
        released, blocks = group.release_all()
        self.used_blocks -= blocks
        self._released += released
        group.preemptions += 1
        orphans = [fork for fork in self.forks if fork.owner == owner]
        if orphans:
            self.forks = deque(fork for fork in self.forks if fork.owner != owner)
        for fork in reversed(orphans):
            self._forget_prefix(fork)
            self.waiting.appendleft(fork)
            self._waiting_branches += 1

    def _unblock(self, budget: int) -> list[PrefillChunk]:
        """Nothing runs, yet ended branches hold blocks for their forks, which do not fit, or
        the oldest swapped request does not fit: preempt such requests by recompute (holding
        ones newest first, then the swapped one) until a sequence can be admitted or comes
        back."""
        chunks: list[PrefillChunk] = []
        while not chunks:
            self._swap_in()
            if self.decoding:
                break
            away = {r.owner for r in self.swapped}  # their held blocks are in host memory
            holding = [o for o, g in self.groups.items() if g.held and o not in away]
            if holding:
                self._preempt_group(holding[-1])
            elif self.swapped:
                self._recompute_swapped(self.swapped.popleft())
            else:
                break
            chunks = self._admit(budget)
        return chunks

    def _recompute_swapped(self, request: SwappedRequest) -> None:
        """A swapped request that cannot come back even to an idle device (its next decodes
        need more blocks than are free) is recomputed instead: its host copy goes."""
        self.swap_used -= request.blocks
        self.swaps_recomputed += 1
        moved_out = [m for m in self._moves_out if m.owner == request.owner]
        if moved_out:  # out this very step: the engine frees its blocks as for a recompute
            self._moves_out.remove(moved_out[0])
        else:
            self._dropped.append(request.owner)
        group = self.groups[request.owner]
        released, _blocks = group.release_all()  # in host memory: the device count stands
        self._released += released
        for seq in reversed(request.running):
            seq.blocks = 0
            self._forget_prefix(seq)
            seq.preemptions += 1
            self.waiting.appendleft(seq)
        for fork in reversed(request.forks):
            self._forget_prefix(fork)
            self.waiting.appendleft(fork)
        self._waiting_branches += sum(s.is_branch for s in (*request.running, *request.forks))
        self._given_up += request.running

    def _swappable(self, owner: int, victims: list[Sequence]) -> bool:
        """vLLM's rule: swap a request with several live branches, when every one of them is
        on the device (decoding, or a fork waiting on its parent's blocks) and host memory has
        room; otherwise recompute."""
        group = self.groups.get(owner)
        if (
            group is None
            or len(group.live) < 2
            or any(v.request_id in self.prefilling for v in victims)
        ):
            return False
        forks = {f.request_id for f in self.forks if f.owner == owner}
        if group.live != {v.request_id for v in victims} | forks:
            return False
        for victim in victims:
            self.decoding.sync(victim, self.step)
        blocks = sum(v.blocks for v in victims) + sum(group.held.values())
        if blocks > self.swap_blocks - self.swap_used:
            self.swaps_refused += self.swap_blocks > 0
            return False
        return True

    def _swap_out(self, owner: int, victims: list[Sequence]) -> None:
        """Move a request's running branches, held blocks and waiting forks to host memory."""
        for victim in victims:
            if self._holds_reserved_block(victim):
                self.used_blocks -= 1  # hand back the block reserved for its decode this step
            self._stop_running(victim)
        group = self.groups[owner]
        forks = [f for f in self.forks if f.owner == owner]
        self.forks = deque(f for f in self.forks if f.owner != owner)
        request = SwappedRequest.of(owner, victims, forks, group.held)
        self.used_blocks -= request.blocks
        self.swap_used += request.blocks
        back = [m for m in self._moves_in if m.owner == owner]
        if back:  # swapped in while planning this very step: it never left host memory
            self._moves_in.remove(back[0])
            self.swapped.appendleft(request)
            return
        self.swapped.append(request)
        self._moves_out.append(request.move())
        group.preemptions += 1

    def _swap_in(self) -> None:
        """Bring swapped requests back, oldest first, while batch slots, the token budget and
        blocks (above the watermark while anything runs) allow; their decodes run this step."""
        while self.swapped:
            request = self.swapped[0]
            sequences = len(self.decoding) + len(request.running)
            need = request.blocks + self._decode_blocks_now(request.running)
            watermark = self.watermark_blocks if self.running else 0
            if (
                len(self.running) + len(request.running) > self.max_batch_size
                or sequences * (1 + self.lookahead_slots) > self.token_budget
                or self.free_blocks() - need < watermark
            ):
                break
            self.swapped.popleft()
            self.swap_used -= request.blocks
            for seq in request.running:
                self.running[seq.request_id] = seq
                self.used_blocks += seq.blocks + self.decoding.add(seq, self.step)
            self.used_blocks += need - sum(s.blocks for s in request.running)
            self.forks.extendleft(reversed(request.forks))
            out = [m for m in self._moves_out if m.owner == request.owner]
            if out:  # swapped out while planning this very step: it never left the device
                self._moves_out.remove(out[0])
                self.groups[request.owner].preemptions -= 1
            else:
                self._moves_in.append(request.move())

    def _decode_blocks_now(self, seqs: list[Sequence]) -> int:
        """New blocks `seqs` need for a decode at this step (those whose write starts a block)."""
        return sum((s.computed + self.lookahead_slots) % self.block_size == 0 for s in seqs)

    def _newest_owner(self) -> int:
        """The request admitted last, by its earliest running branch (admission order)."""
        first: dict[int, int] = {}
        for position, seq in enumerate(self.running.values()):
            first.setdefault(seq.owner, position)
        return max(first, key=first.__getitem__)

    def _evict(self, victim: Sequence) -> None:
        """Recompute preemption: free the blocks, back to the front of the queue."""
        if self._holds_reserved_block(victim):
            self.used_blocks -= 1  # hand back the block reserved for its decode this step
        self._stop_running(victim)
        self.used_blocks -= victim.blocks
        victim.blocks = 0
        self._forget_prefix(victim)
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        if victim.is_branch:
            self._waiting_branches += 1

    def _forget_prefix(self, seq: Sequence) -> None:
        seq.computed = 0
        seq.shared_blocks = 0
        seq.parent_id = -1
        group = self.groups.get(seq.owner)
        if group is not None:
            group.detach(seq.request_id)

    def _holds_reserved_block(self, seq: Sequence) -> bool:
        if seq.request_id not in self.decoding.members or self._decode_reserved_step != self.step:
            return False
        return self.step % self.block_size == self.decoding.residue(seq)

    def swap_counts(self) -> dict[str, int]:
        """How preemptions went to host memory, for a run's info."""
        return {
            "swap_outs": self.swap_outs,
            "swaps_refused": self.swaps_refused,
            "swaps_recomputed": self.swaps_recomputed,
            "swapped_blocks": self.swapped_blocks,
        }

    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks
