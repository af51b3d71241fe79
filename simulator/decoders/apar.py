"""APAR on the simulator: request trees walked as their branches emit.

Requests get their trees (`apar_trees.py`) when they are routed: the root's length stop is
its own token count. After each step the replica reports which sequences emitted; the
walker (`apar_walker.py`) says which of them fork now, and the policy starts those
children (`ContinuousBatching.fork`: shared prefix blocks, a two-token first step). A
`BranchBook` records one emission per request and step and each request's tree, as the
real engine does, so the records of a replayed real run line up with its own.
"""

from __future__ import annotations

import numpy as np

from simulator.decoders.apar_walker import BranchWalker
from workbench.apar_records import BranchBook, BranchRecords
from workbench.apar_trees import BranchTree
from workbench.recorder import Recorder
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.plan import StepPlan, StepResult
from workbench.scheduling.sequence import Sequence


class AparBranches:
    def __init__(self, trees: list[BranchTree], swap_block_s: float = 0.0) -> None:
        self.trees = trees  # per request
        self.swap_block_s = swap_block_s  # one KV block to or from host memory
        self.walker = BranchWalker(first_child_id=len(trees))
        self.book: BranchBook | None = None

    def attach(self, recorder: Recorder) -> None:
        self.book = BranchBook(recorder)

    def root_tokens(self, request_id: int) -> int:
        """The root's own tokens: its length stop."""
        return self.trees[request_id].tokens[0]

    def start(self, request_id: int) -> None:
        assert self.book is not None
        self.walker.start(request_id, self.trees[request_id])
        self.book.start(request_id)

    def swap_s(self, plan: StepPlan) -> float:
        """What the step's swaps cost: they run before its forward, as vLLM's do."""
        return plan.swapped_blocks * self.swap_block_s

    @staticmethod
    def emitting(policy: ContinuousBatching, plan: StepPlan) -> list[int]:
        """Sequences that emit at the end of `plan` (before it completes)."""
        decodes = [s.request_id for s in policy.decode_sequences()]
        done = [c.seq.request_id for c in plan.prefills if c.tokens == c.seq.prefill_remaining]
        return decodes + done

    def extra_before_fork(self, seqs: list[Sequence]) -> np.ndarray:
        """(b,) most tokens each branch may emit beyond one this step: a fork ends it."""
        return self.walker.extra_before_fork(s.request_id for s in seqs)

    def after_step(
        self,
        replica: int,
        step: int,
        emitting: list[int],
        policy: ContinuousBatching,
        result: StepResult,
        extra: dict[int, int] | None = None,
    ) -> list[tuple[int, int, int]]:
        """Record the step's emissions (one token each, plus `extra` from speculation) and
        start the children it forked; returns (parent, child, tokens they share) per fork."""
        assert self.book is not None
        for sid in sorted(emitting):
            self.book.emit(sid, replica, step, 1 + (extra.get(sid, 0) if extra else 0))
        self.book.close_step(replica, step)
        for seq in result.started:
            seq.first_emit_step = -1  # the book records APAR emissions, not the policy's spans
        decoding = {s.request_id: s for s in policy.decode_sequences()}
        forks = []
        for fork in self.walker.emitted(sorted(emitting), extra):
            child = policy.fork(decoding[fork.parent_id], fork.child_id, fork.own_tokens)
            self.book.fork(fork.parent_id, fork.child_id)
            forks.append((fork.parent_id, fork.child_id, child.computed))
        return forks

    def finish(self, seq: Sequence) -> int:
        """The request ended: keep its tree; returns the tokens it emitted."""
        assert self.book is not None
        rid = seq.request_id
        tree = self.trees[rid]
        answers = [tree.answer_tokens[self.walker.branch_of(s)] for s in self.book.by_request[rid]]
        self.walker.finish(rid)
        return self.book.finish(rid, answers)

    def records(self) -> BranchRecords:
        assert self.book is not None
        return self.book.records()
