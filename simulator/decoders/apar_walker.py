"""Walks APAR request trees as their branches emit: which branch forks after a step.

Each running branch counts its own emitted tokens; when a branch's count reaches the fork
position of one of its children in its request's tree, that child is forked (the parent's
newest token was its fork token). Preemption never changes a count: emitted tokens stay
emitted, and a recomputed branch goes on from where it was. A branch emitting several tokens
in a step (APAR with speculative decoding) never passes a fork: its fork token ends its
emission (`extra_before_fork` caps the draws).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from workbench.apar_trees import BranchTree

NO_FORK_AHEAD = 1 << 30


@dataclass
class _Branch:
    owner: int  # the request
    index: int  # the branch within its tree
    own: int = 0  # own tokens emitted so far


@dataclass(frozen=True)
class Fork:
    parent_id: int  # sequence id of the parent
    child_id: int  # the new sequence id
    own_tokens: int  # the child's own tokens, from its tree


class BranchWalker:
    def __init__(self, first_child_id: int) -> None:
        """first_child_id: sequence ids of children start here (above every request id)."""
        self.next_id = first_child_id
        self.trees: dict[int, BranchTree] = {}  # request → its tree
        self._forks: dict[int, dict[tuple[int, int], int]] = {}  # request → children_by_fork
        self._fork_at: dict[int, dict[int, list[int]]] = {}  # request → branch → fork positions
        self.branches: dict[int, _Branch] = {}  # sequence id → its branch
        self.sequence_ids: dict[int, list[int]] = {}  # request → its branches' sequence ids

    def start(self, request_id: int, tree: BranchTree) -> None:
        self.trees[request_id] = tree
        self._forks[request_id] = tree.children_by_fork()
        positions: dict[int, list[int]] = {}
        for branch, position in sorted(self._forks[request_id]):
            positions.setdefault(branch, []).append(position)
        self._fork_at[request_id] = positions
        self.branches[request_id] = _Branch(request_id, 0)
        self.sequence_ids[request_id] = [request_id]

    def extra_before_fork(self, sequence_ids: Iterable[int]) -> np.ndarray:
        """(b,) most tokens each branch may emit beyond one this step without passing its
        next fork (a large number when none is ahead)."""
        out = []
        for sequence_id in sequence_ids:
            branch = self.branches[sequence_id]
            positions = self._fork_at[branch.owner].get(branch.index, [])
            i = bisect.bisect_right(positions, branch.own)  # the first fork still ahead
            out.append(positions[i] - branch.own - 1 if i < len(positions) else NO_FORK_AHEAD)
        return np.array(out, dtype=np.int64)

    def emitted(
        self, sequence_ids: Iterable[int], extra: Mapping[int, int] | None = None
    ) -> list[Fork]:
        """These sequences emitted one token each (plus `extra`) in the step just run: the
        forks due."""
        forks: list[Fork] = []
        for sequence_id in sequence_ids:
            branch = self.branches[sequence_id]
            branch.own += 1 + (extra.get(sequence_id, 0) if extra else 0)
            child = self._forks[branch.owner].get((branch.index, branch.own))
            if child is None:
                continue
            child_id = self.next_id
            self.next_id += 1
            self.branches[child_id] = _Branch(branch.owner, child)
            self.sequence_ids[branch.owner].append(child_id)
            forks.append(Fork(sequence_id, child_id, self.trees[branch.owner].tokens[child]))
        return forks

    def branch_of(self, sequence_id: int) -> int:
        return self.branches[sequence_id].index

    def finish(self, request_id: int) -> None:
        """The request ended: forget its branches."""
        for sequence_id in self.sequence_ids.pop(request_id):
            del self.branches[sequence_id]
        del self.trees[request_id], self._forks[request_id], self._fork_at[request_id]
