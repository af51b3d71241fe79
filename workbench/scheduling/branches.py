"""A request with several branches (APAR) as continuous batching keeps it.

A branch is a `Sequence` of its own; the group ties a request's branches together: which
are still live (running or waiting), which ended but still hold blocks, who forked whom,
and the request's root sequence, which stands for the request in the step results.

Rules (see `ContinuousBatching.fork`):
- Blocks: a branch is charged for the blocks it does not share (`Sequence.shared_blocks`
  are its parent's). A branch that ends releases its blocks at once unless a live or
  held descendant may still read them (a fork waiting for admission shares its parent's
  prefix, and the parent may end first); a held branch is released when its last such
  descendant is, so a request that ends has released everything.
- Preemption takes the whole request: every running branch is evicted by recompute and
  later recomputes its own visible context (prompt + what it has seen), without sharing;
  held blocks are released and waiting forks lose their shared prefix the same way. A
  branch that recomputes its context reads no ancestor's blocks any more, so none is held
  for it (`detach`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.scheduling.sequence import Sequence


@dataclass
class BranchGroup:
    root: Sequence  # the request's first sequence: stands for the request in StepResults
    live: set[int] = field(default_factory=set)  # branch ids running or waiting
    parent: dict[int, int] = field(default_factory=dict)  # branch id → the one it forked from
    held: dict[int, int] = field(default_factory=dict)  # ended branch id → blocks it holds
    # Branches that recompute their whole visible context (preempted by recompute): they no
    # longer read their ancestors' blocks, so they hold none of them.
    detached: set[int] = field(default_factory=set)
    preemptions: int = 0  # times the whole request was preempted

    @classmethod
    def of(cls, root: Sequence) -> BranchGroup:
        return cls(root=root, live={root.request_id}, preemptions=root.preemptions)

    def add(self, child: Sequence, parent_id: int) -> None:
        self.live.add(child.request_id)
        self.parent[child.request_id] = parent_id

    def end(self, seq: Sequence) -> list[tuple[int, int]]:
        """`seq` ended: (branch id, blocks) of the branches released now, itself first,
        then ancestors that no other branch can read any more."""
        self.live.discard(seq.request_id)
        self.held[seq.request_id] = seq.blocks
        released: list[tuple[int, int]] = []
        branch = seq.request_id
        while branch >= 0 and not self._read_by_others(branch):
            if branch in self.held:  # (an ancestor released by a preemption holds nothing)
                released.append((branch, self.held.pop(branch)))
            branch = self.parent.get(branch, -1)
        return released

    def release_all(self) -> tuple[list[int], int]:
        """Every held branch released (the request is preempted): their ids, and blocks."""
        released = (list(self.held), sum(self.held.values()))
        self.held.clear()
        return released

    def detach(self, branch: int) -> None:
        """`branch` forgot its shared prefix: it will recompute it."""
        self.detached.add(branch)

    def _read_by_others(self, branch: int) -> bool:
        return any(self._reads(other, branch) for other in (*self.live, *self.held))

    def _reads(self, branch: int, ancestor: int) -> bool:
        """Whether `branch` reads `ancestor`'s blocks: a descendant through shared prefixes
        only (a detached branch reads none above itself)."""
        while branch not in self.detached and branch in self.parent:
            branch = self.parent[branch]
            if branch == ancestor:
                return True
        return False
