"""A request with several branches (APAR) as continuous batching keeps it.

A branch is a `Sequence` of its own; the group ties a request's branches together: which
are still live (running or waiting), the blocks of branches that already ended, and the
request's root sequence, which stands for the request in the step results.

Rules (see `ContinuousBatching.fork`):
- Blocks: a branch is charged for the blocks it does not share (`Sequence.shared_blocks`
  are its parent's). A branch that ends keeps its blocks charged until the whole request
  ends, since later branches may still read them: a fork waiting for admission shares its
  parent's prefix, and the parent may end first.
- Preemption takes the whole request: every running branch is evicted by recompute and
  later recomputes its own visible context (prompt + what it has seen), without sharing;
  waiting forks of the request lose their shared prefix the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.scheduling.sequence import Sequence


@dataclass
class BranchGroup:
    root: Sequence  # the request's first sequence: stands for the request in StepResults
    live: set[int] = field(default_factory=set)  # branch ids running or waiting
    retained_blocks: int = 0  # blocks of ended branches, held until the request ends
    preemptions: int = 0  # times the whole request was preempted

    @classmethod
    def of(cls, root: Sequence) -> BranchGroup:
        return cls(root=root, live={root.request_id}, preemptions=root.preemptions)
