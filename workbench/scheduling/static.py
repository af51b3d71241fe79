"""Static batching: a batch forms in arrival order and runs, padded, until its longest member
ends (the classic `generate` loop, and the baseline of sequence scheduling).

The batch computes every slot every step: prompts are padded to the longest prompt, and a
member that has finished keeps its slot as padding until the batch ends. A member's own
finish time is its last token (a streaming client is done then), but its slot is freed
only with the batch. KV is reserved for the whole padded rectangle when the batch starts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping

import numpy as np

from workbench.scheduling.blocks import blocks_for
from workbench.scheduling.padded_batch import advance_padded_batch
from workbench.scheduling.plan import PrefillChunk, StepPlan, StepResult
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.sequence import Sequence


class StaticBatching(BatchPolicy):
    def __init__(
        self, *, num_blocks: int, block_size: int, batch_size: int, max_wait_s: float = 0.0
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.batch_size = batch_size
        self.max_wait_s = max_wait_s
        self.step = 0
        self.waiting: deque[Sequence] = deque()
        self.batch: list[Sequence] = []  # members, padding included
        self.live: list[Sequence] = []  # members still generating, by remaining length
        self.padded_prompt = 0
        self.batch_steps = 0  # steps this batch has run (prefill included)
        self.used_blocks = 0

    def add(self, seq: Sequence, now: float) -> None:
        self.waiting.append(seq)

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.live)

    def queued(self) -> int:
        return len(self.waiting)

    def next_wakeup_s(self, now: float) -> float | None:
        if self.batch or not self.waiting:
            return None
        return self.waiting[0].arrival_s + self.max_wait_s

    def decode_sequences(self) -> list[Sequence]:
        return list(self.batch) if self.batch_steps > 0 else []

    def schedule(self, now: float) -> StepPlan | None:
        if not self.batch and not self._form_batch(now):
            return None
        if self.batch_steps == 0:
            return self._prefill_plan()
        return self._decode_plan()

    def complete(
        self,
        plan: StepPlan,
        n_steps: int = 1,
        stopped: Collection[int] = (),
        extra: Mapping[int, int] | None = None,
    ) -> StepResult:
        if extra:
            raise ValueError("static batching runs one token per step (vanilla decoding)")
        self.step += n_steps
        self.batch_steps += n_steps
        started = list(self.batch) if plan.prefills else []
        for seq in started:
            seq.first_emit_step = plan.step
        finished, self.live = advance_padded_batch(
            self.live, self.padded_prompt, self.batch_steps, n_steps, stopped
        )
        if not self.live:
            self._end_batch()
        return StepResult(started=started, finished=finished)

    # ------------------------------------------------------------------ internals

    def _form_batch(self, now: float) -> bool:
        full = len(self.waiting) >= self.batch_size
        waited = self.waiting and now >= self.waiting[0].arrival_s + self.max_wait_s
        if not (full or waited):
            return False
        members: list[Sequence] = []
        while self.waiting and len(members) < self.batch_size:
            candidate = [*members, self.waiting[0]]
            if self._rectangle_blocks(candidate) > self.num_blocks and members:
                break
            members.append(self.waiting.popleft())
        self.batch = members
        self.live = sorted(members, key=lambda s: (s.output_tokens, s.request_id))
        self.padded_prompt = max(s.prompt_tokens for s in members)
        self.used_blocks = self._rectangle_blocks(members)
        self.batch_steps = 0
        return True

    def _rectangle_blocks(self, members: list[Sequence]) -> int:
        # A slot caches the padded prompt and every emitted token but the last.
        longest = max(s.prompt_tokens for s in members) + max(s.output_tokens for s in members)
        return len(members) * blocks_for(longest - 1, self.block_size)

    def _prefill_plan(self) -> StepPlan:
        chunks = [PrefillChunk(s, self.padded_prompt, 0) for s in self.batch]
        return self._plan(chunks, decode_slots=0, context_sum=0, repeat=1)

    def _decode_plan(self) -> StepPlan:
        slots = len(self.batch)
        # Decode step j (j = batch_steps ≥ 1) feeds token j; each padded slot then holds
        # padded_prompt + j keys.
        context_sum = slots * (self.padded_prompt + self.batch_steps)
        repeat = self.live[0].output_tokens - self.live[0].generated
        return self._plan([], decode_slots=slots, context_sum=context_sum, repeat=repeat)

    def _plan(
        self, chunks: list[PrefillChunk], *, decode_slots: int, context_sum: int, repeat: int
    ) -> StepPlan:
        return StepPlan(
            step=self.step,
            prefills=chunks,
            decode_batch_size=decode_slots,
            decode_context_sum=context_sum,
            decode_context_max=context_sum // decode_slots if decode_slots else 0,  # padded slots
            emitting=len(self.live),
            kv_blocks_used=np.full(repeat, self.used_blocks, dtype=np.int64),
            repeatable_steps=repeat,
        )

    def _end_batch(self) -> None:
        for seq in self.batch:
            seq.blocks = 0
        self.batch = []
        self.used_blocks = 0
