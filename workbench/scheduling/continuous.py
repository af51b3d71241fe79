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
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from workbench.scheduling.blocks import blocks_for, steps_within_budget
from workbench.scheduling.decode_set import DecodeSet
from workbench.scheduling.plan import PrefillChunk, StepPlan, StepResult
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.sequence import Sequence
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

    # ------------------------------------------------------------------ engine interface

    def add(self, seq: Sequence, now: float) -> None:
        self.waiting.append(seq)

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def queued(self) -> int:
        return len(self.waiting)

    def decode_sequences(self) -> list[Sequence]:
        return list(self.decoding.members.values())

    def schedule(self, now: float) -> StepPlan | None:
        self.waiting.set_time(now)
        preempted = self._reserve_decode_blocks()
        budget = self.token_budget - len(self.decoding) * (1 + self.lookahead_slots)
        chunks, budget = self._continue_prefills(budget, preempted)
        if not preempted:  # as vLLM: a step that preempted admits nobody, or victims thrash
            chunks += self._admit(budget)
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
        started, finished = self._finish_prefills(plan.prefills)
        for request_id, tokens in (extra or {}).items():
            # May overdraw the budget until the next `schedule` preempts: the physical cache
            # only ever holds what the step reserved, the overdraw is next step's headroom.
            self.used_blocks += self.decoding.advance(
                self.decoding.members[request_id], self.step, tokens
            )
        finished += self.decoding.pop_finished(self.step)
        finished += self._stop_early(stopped)
        for seq in finished:
            self._release(seq)
        return StepResult(started=started, finished=finished)

    # ------------------------------------------------------------------ planning

    def _reserve_decode_blocks(self) -> list[Sequence]:
        """Allocate this step's decode blocks, preempting the newest sequences if short."""
        preempted: list[Sequence] = []
        need = self.decoding.block_demand_at(self.step)
        while need > self.free_blocks():
            victim = self._preempt_newest()
            preempted.append(victim)
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
        while self.waiting and len(self.running) < self.max_batch_size and budget > 0:
            seq = self.waiting.head()
            tokens = seq.prefill_remaining
            if self.chunked_prefill:
                tokens = min(tokens, budget)
            elif tokens > budget:
                break
            reserved = seq.prefill_remaining if self.whole_prompt_blocks else tokens
            need = blocks_for(reserved, self.block_size)
            if self.free_blocks() - need < self.watermark_blocks:
                break
            self.waiting.popleft()
            self.running[seq.request_id] = seq
            self.prefilling[seq.request_id] = seq
            seq.blocks = need
            self.used_blocks += need
            chunks.append(PrefillChunk(seq, tokens, 0))
            budget -= tokens
        return chunks

    def _grow(self, seq: Sequence, tokens: int, preempted: list[Sequence]) -> bool:
        """Give a prefilling `seq` blocks for `tokens` more; False if it was preempted."""
        need = max(blocks_for(seq.computed + tokens, self.block_size) - seq.blocks, 0)
        while need > self.free_blocks():
            victim = self._preempt_newest()
            preempted.append(victim)
            if victim is seq:
                return False
        seq.blocks += need
        self.used_blocks += need
        return True

    def _plan(self, chunks: list[PrefillChunk], preempted: list[Sequence]) -> StepPlan:
        size = len(self.decoding)
        single = chunks or preempted or self.lookahead_slots
        repeat = 1 if single else self._repeatable_decode_steps()
        if repeat == 1:
            used = np.array([self.used_blocks])
        else:
            demand = self.decoding.block_demand(self.step + 1, repeat - 1)
            used = self.used_blocks + np.concatenate(([0], np.cumsum(demand)))  # (repeat,)
        return StepPlan(
            step=self.step,
            prefills=chunks,
            decode_batch_size=size,
            decode_context_sum=self.decoding.context_sum(self.step),
            emitting=size + sum(c.tokens == c.seq.prefill_remaining for c in chunks),
            kv_blocks_used=used,
            preempted=preempted,
            repeatable_steps=repeat,
            replan_at_s=self._admission_changes_at_s() if repeat > 1 else None,
        )

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

    def _release(self, seq: Sequence) -> None:
        if seq.request_id in self.decoding.members:
            self.decoding.remove(seq, self.step)
        del self.running[seq.request_id]
        self.prefilling.pop(seq.request_id, None)
        self.used_blocks -= seq.blocks
        seq.blocks = 0

    def _preempt_newest(self) -> Sequence:
        victim = next(reversed(self.running.values()))
        if self._holds_reserved_block(victim):
            self.used_blocks -= 1  # hand back the block reserved for its decode this step
        self._release(victim)
        victim.computed = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    def _holds_reserved_block(self, seq: Sequence) -> bool:
        if seq.request_id not in self.decoding.members or self._decode_reserved_step != self.step:
            return False
        return self.step % self.block_size == self.decoding.residue(seq)

    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks
