"""Sequence scheduling (Zheng et al., 2023): batch inference over a pool of requests, in
groups scheduled by predicted response length (`seqsched_rules`), each batch run as a
padded static batch.

A batch computes every slot every step: prompts are padded to the longest, a member that
is done keeps its slot as padding, and the batch ends when all members are done or at its
cap. KV is reserved for the padded rectangle up to the cap when the batch starts (an
engine knows the cap, not the true lengths).

FCR failures (members not done when a batch stops at an FCR cap) are wasted work: their
blocks are freed, their progress is reset (generation restarts from zero; the prompt is
recomputed), and they are re-queued for the group's recompute batches, which cut what
still runs at their cap (the limit). An engine sees a failure as a preemption (the next
plan's `preempted`, `preemptions` + 1); the request's final record is that of its last
attempt.

A response longer than the generation limit (`over_limit`):
- `recompute`, as the paper's code: such a length is only known to exceed the limit (the
  paper's lengths were measured with it), so no batch reaches its end: a batch runs it to
  its cap. An FCR cap (the prediction, even above the limit) fails it, once; its recompute
  batch, and any batch without FCR (capped at the limit), cut it at the limit, done. On the
  real backend it may still end earlier at a real stop (EOS), as in the paper's code.
- `truncate`: it is cut at the limit in whatever batch it runs, done, never a failure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError
from workbench.scheduling.blocks import blocks_for
from workbench.scheduling.padded_batch import advance_padded_batch
from workbench.scheduling.plan import PrefillChunk, StepPlan, StepResult
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.seqsched_rules import (
    PlannedBatch,
    ScheduleRules,
    plan_group,
    plan_recompute,
)
from workbench.scheduling.sequence import Sequence

# The length stop of a response longer than the limit under `over_limit: recompute`: beyond
# every cap, so only a cap (or a real stop) ends it.
NO_END_TOKENS = 1 << 40


@dataclass(frozen=True)
class BatchLog:
    """One batch that ran: what was planned, how many steps it took, who failed."""

    group: int
    planned: PlannedBatch
    steps: int
    failed: tuple[int, ...]


@dataclass
class _RunningBatch:
    planned: PlannedBatch
    members: list[Sequence]  # slots, in planned order
    live: list[Sequence]  # members still generating, shortest remaining first
    padded_prompt: int
    steps: int = 0  # steps run so far (the prefill step included)


class SequenceScheduling(BatchPolicy):
    def __init__(
        self, *, num_blocks: int, block_size: int, rules: ScheduleRules, group_size: int
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.rules = rules
        self.group_size = group_size
        self.step = 0
        self.used_blocks = 0
        self.waiting: deque[Sequence] = deque()
        self.group: dict[int, Sequence] = {}  # the current group, unfinished members
        self.pending: deque[PlannedBatch] = deque()  # the current group's batches to run
        self.failed: list[Sequence] = []  # FCR failures awaiting recompute, failure order
        self.batch: _RunningBatch | None = None
        self.batch_log: list[BatchLog] = []  # every batch run so far, in order
        self.groups = 0  # groups formed so far
        self._evicted: list[Sequence] = []  # failures not yet handed to the engine

    # ------------------------------------------------------------------ engine interface

    def add(self, seq: Sequence, now: float) -> None:
        needs_prediction = self.rules.order == "predicted" or self.rules.fcr
        if needs_prediction and seq.predicted_tokens is None:
            raise ValueError(f"request {seq.request_id} has no predicted length")
        if seq.output_tokens > self.rules.generation_limit:
            truncate = self.rules.over_limit == "truncate"
            seq.output_tokens = self.rules.generation_limit if truncate else NO_END_TOKENS
        self.waiting.append(seq)

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.group)

    def queued(self) -> int:
        return len(self.waiting)

    def decode_sequences(self) -> list[Sequence]:
        batch = self.batch
        return list(batch.members) if batch is not None and batch.steps > 0 else []

    def schedule(self, now: float) -> StepPlan | None:
        if self.batch is None:
            planned = self._next_batch()
            if planned is None:
                assert not self._evicted  # failures always leave a recompute batch behind
                return None
            self._start(planned)
        return self._plan()

    def complete(
        self,
        plan: StepPlan,
        n_steps: int = 1,
        stopped: Collection[int] = (),
        extra: Mapping[int, int] | None = None,
    ) -> StepResult:
        if extra:
            raise ValueError("sequence scheduling runs one token per step (vanilla decoding)")
        batch = self.batch
        assert batch is not None
        self.step += n_steps
        batch.steps += n_steps
        started = list(batch.members) if plan.prefills else []
        for seq in started:
            seq.first_emit_step = plan.step
        finished, batch.live = advance_padded_batch(
            batch.live, batch.padded_prompt, batch.steps, n_steps, stopped
        )
        at_cap = batch.steps >= batch.planned.cap_tokens
        if at_cap and not self._fails_at_cap(batch.planned):
            finished, batch.live = finished + batch.live, []  # cut at the cap (the limit)
        for seq in finished:
            del self.group[seq.request_id]
        if not batch.live or at_cap:
            self._end_batch(batch)
        return StepResult(started=started, finished=finished)

    # ------------------------------------------------------------------ groups and batches

    def _fails_at_cap(self, planned: PlannedBatch) -> bool:
        """FCR batches fail what is still running at their cap; the others cut it there."""
        return self.rules.fcr and not planned.recompute

    def _next_batch(self) -> PlannedBatch | None:
        if not self.pending:
            if self.failed:
                ids = [s.request_id for s in self.failed]
                self.pending.extend(plan_recompute(ids, self.rules))
                self.failed = []
            elif self.waiting:
                self._form_group()
            else:
                return None
        return self.pending.popleft()

    def _form_group(self) -> None:
        size = min(self.group_size, len(self.waiting))
        members = [self.waiting.popleft() for _ in range(size)]
        self.group = {s.request_id: s for s in members}
        limit = self.rules.generation_limit
        requests = [(s.request_id, s.predicted_tokens or limit) for s in members]
        self.pending.extend(plan_group(requests, self.rules))
        self.groups += 1

    def _start(self, planned: PlannedBatch) -> None:
        members = [self.group[i] for i in planned.request_ids]
        padded = max(s.prompt_tokens for s in members)
        # A slot caches the padded prompt and every generated token but the last.
        blocks = len(members) * blocks_for(padded + planned.cap_tokens - 1, self.block_size)
        if blocks > self.num_blocks:
            raise WorkbenchError(
                f"a batch of {len(members)} × ({padded} prompt + {planned.cap_tokens} generated) "
                f"tokens needs {blocks} KV blocks but a replica has {self.num_blocks}; use "
                "bigger hardware, a smaller batch_size or a lower generation_limit",
                field="scheduler.kv_cache",
            )
        live = sorted(members, key=lambda s: (s.output_tokens, s.request_id))
        self.batch = _RunningBatch(planned, members, live, padded)
        self.used_blocks = blocks
        for seq in members:
            seq.blocks = blocks // len(members)

    def _end_batch(self, batch: _RunningBatch) -> None:
        live = {s.request_id for s in batch.live}
        failed = tuple(s.request_id for s in batch.members if s.request_id in live)  # slot order
        for request_id in failed:  # still running at an FCR cap: the attempt is wasted
            seq = self.group[request_id]
            seq.generated = seq.computed = 0
            seq.preemptions += 1
            self.failed.append(seq)
            self._evicted.append(seq)
        for seq in batch.members:
            seq.blocks = 0
        self.batch_log.append(BatchLog(self.groups - 1, batch.planned, batch.steps, failed))
        self.batch = None
        self.used_blocks = 0

    # ------------------------------------------------------------------ plans

    def _plan(self) -> StepPlan:
        batch = self.batch
        assert batch is not None
        preempted, self._evicted = self._evicted, []
        slots = len(batch.members)
        if batch.steps == 0:
            prefills = [PrefillChunk(s, batch.padded_prompt, 0) for s in batch.members]
            decode_slots, context_sum, repeat = 0, 0, 1
        else:
            # Step j (j = steps so far) feeds token j: a slot then holds padded_prompt + j keys.
            prefills, decode_slots = [], slots
            context_sum = slots * (batch.padded_prompt + batch.steps)
            to_finish = batch.live[0].output_tokens - batch.live[0].generated
            repeat = min(to_finish, batch.planned.cap_tokens - batch.steps)
        return StepPlan(
            step=self.step,
            prefills=prefills,
            decode_batch_size=decode_slots,
            decode_context_sum=context_sum,
            decode_context_max=context_sum // slots if decode_slots else 0,  # slots are padded
            emitting=len(batch.live),
            kv_blocks_used=np.full(repeat, self.used_blocks, dtype=np.int64),
            preempted=preempted,
            repeatable_steps=repeat,
        )
