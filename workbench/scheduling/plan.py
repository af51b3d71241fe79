"""What a policy hands its engine (a step plan) and what it hands back (a step result)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from workbench.scheduling.sequence import Sequence


@dataclass(slots=True)
class PrefillChunk:
    seq: Sequence
    tokens: int  # new prompt tokens computed in this step
    context_tokens: int  # tokens already cached before the chunk

    @property
    def is_fork(self) -> bool:
        """An APAR fork's chunk (a branch's fork and child tokens over its parent's prefix):
        the real engine computes it in the decode forward, as rows beside the decodes'."""
        return self.seq.parent_id >= 0


def chunk_rows(tokens: Iterable[int], contexts: Iterable[int]) -> tuple[int, int]:
    """(tokens, keys) of chunks computed as rows of one forward: a chunk of c tokens over p
    cached ones attends to c·p + c(c + 1)/2 keys (causal inside the chunk)."""
    pairs = list(zip(tokens, contexts, strict=True))
    return sum(c for c, _ in pairs), sum(c * p + c * (c + 1) // 2 for c, p in pairs)


@dataclass(frozen=True, slots=True)
class SwapMove:
    """A request's KV moved between the device and host memory (APAR's multi-branch
    preemption): the branches whose cache tables move, and the blocks the policy counts."""

    owner: int  # the request
    branches: tuple[int, ...]  # running branches, then ended ones still holding blocks
    blocks: int


@dataclass
class StepPlan:
    """The next step of one replica.

    A plan with no prefill chunks may repeat: `repeatable_steps` says how many consecutive
    steps the policy would schedule identically if nothing arrives (no finish, no KV
    shortage, no admission in between) and no repeated step starts at or after
    `replan_at_s`. Engines may run up to that many in one go and must then call `complete`
    with the number actually run.
    """

    step: int  # replica step index of the (first) step
    prefills: list[PrefillChunk]
    decode_batch_size: int  # sequences computing one decode token (padding slots included)
    decode_context_sum: int  # Σ KV length incl. the new token over decode slots, first step;
    # each repeated step adds one key per decode slot
    decode_context_max: int  # the longest of those lengths, first step (+1 per repeat)
    emitting: int  # sequences that emit a token at the end of each repeated decode step
    kv_blocks_used: np.ndarray  # (repeatable_steps,) blocks in use during each step
    preempted: list[Sequence] = field(default_factory=list)  # evicted while planning
    # Ended branches (APAR) whose KV blocks were released while planning: their request was
    # preempted (its running branches are in `preempted`).
    released: list[int] = field(default_factory=list)
    # Requests swapped out to host memory while planning (their running branches are not in
    # `preempted`: nothing is recomputed), and swapped back in before this step runs.
    swapped_out: list[SwapMove] = field(default_factory=list)
    swapped_in: list[SwapMove] = field(default_factory=list)
    # Swapped requests sent to recompute instead (their branches are in `preempted`): their
    # host copies are discarded.
    swap_dropped: list[int] = field(default_factory=list)
    repeatable_steps: int = 1
    # A repeated step starting at or after this time must be planned afresh: the admission
    # order changes then (an aging deadline). None: only arrivals and the count bound it.
    replan_at_s: float | None = None

    @property
    def batch_size(self) -> int:
        return self.decode_batch_size + len(self.prefills)

    @property
    def prefill_tokens(self) -> int:
        return sum(c.tokens for c in self.prefills)

    @property
    def swapped_blocks(self) -> int:
        """Blocks this step moves between the device and host memory, both ways."""
        return sum(m.blocks for m in (*self.swapped_out, *self.swapped_in))


@dataclass
class StepResult:
    started: list[Sequence]  # emitted their first token of an emission span this step
    finished: list[Sequence]  # emitted their last token; now out of the replica
    # Branches (APAR) that emitted their last token; their request is in `finished`, as its
    # root sequence, once its last branch ended.
    branches_ended: list[Sequence] = field(default_factory=list)
    # Branch ids whose KV blocks were released (not necessarily ended this step: a branch
    # that ended earlier is held while a descendant may still read its blocks).
    released: list[int] = field(default_factory=list)


def forward_split(plan: StepPlan) -> tuple[list[PrefillChunk], list[PrefillChunk]]:
    """(APAR forks' chunks the engine computes in the decode forward, the chunks it runs as
    prefill forwards). Beside decodes a fork's chunk is rows of the decode forward; in a
    step without decodes the forward holds the chunks alone, priced and recorded as a
    prefill's."""
    if not plan.prefills or not plan.decode_batch_size:
        return [], list(plan.prefills)
    return [c for c in plan.prefills if c.is_fork], [c for c in plan.prefills if not c.is_fork]
