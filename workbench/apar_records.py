"""APAR records: one emission row per request and step, and each request's branch tree.

Both backends serve APAR requests as branches (sequences of their own) but record them as
requests: a step's tokens from all of a request's branches make one emission of k tokens
(k = its branches that emitted in the step), like a multi-token decoder's burst, so TTFT,
TPOT and ITL keep DESIGN §6's meaning. Consecutive steps with the same k share one
emission row (a span). The tree of each request (`workbench.apar_trees.BranchTree`: fork
positions, tokens per branch) is kept in `BranchRecords`, with each branch's first and last
emitting step and how many steps it emitted in (fewer than its tokens when it speculated),
so metrics and the simulator can replay it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.apar_trees import BranchTree
from workbench.recorder import Recorder


@dataclass
class BranchRecords:
    """One row per branch of every request of an APAR run (the `branches` table)."""

    request_id: np.ndarray  # (b,) int64
    branch: np.ndarray  # (b,) int32: 0 is the root
    parent: np.ndarray  # (b,) int32: the branch it forked from, -1 for the root
    fork_at: np.ndarray  # (b,) int64: the parent's own tokens when it forked (fork token incl.)
    tokens: np.ndarray  # (b,) int64: own tokens emitted (fork tokens and EOS included)
    answer_tokens: np.ndarray  # (b,) int64: own tokens in the reassembled answer
    first_step: np.ndarray  # (b,) int64: step of its first own emission
    last_step: np.ndarray  # (b,) int64: step of its last
    replica: np.ndarray  # (b,) int32
    steps: np.ndarray  # (b,) int64: steps it emitted in (its tokens, unless it speculated)

    def __len__(self) -> int:
        return len(self.request_id)

    def trees(self) -> dict[int, BranchTree]:
        """Each request's tree, by request id."""
        out: dict[int, BranchTree] = {}
        order = np.lexsort((self.branch, self.request_id))
        ids = self.request_id[order]
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        for lo, hi in zip(starts, [*starts[1:], len(ids)], strict=True):
            rows = order[lo:hi]
            out[int(ids[lo])] = BranchTree(
                tuple(self.parent[rows].tolist()),
                tuple(self.fork_at[rows].tolist()),
                tuple(self.tokens[rows].tolist()),
                tuple(self.answer_tokens[rows].tolist()),
            )
        return out


@dataclass
class _Branch:
    owner: int
    index: int
    parent: int  # parent index, -1 for the root
    fork_at: int
    tokens: int = 0
    first_step: int = -1
    last_step: int = -1
    replica: int = 0
    steps: int = 0


@dataclass
class _Span:
    replica: int
    first_step: int
    last_step: int
    tokens: int


@dataclass
class BranchBook:
    """Collects an APAR run's emissions per request and step, and its branch trees."""

    recorder: Recorder
    branches: dict[int, _Branch] = field(default_factory=dict)  # sequence id → branch
    by_request: dict[int, list[int]] = field(default_factory=dict)  # request → sequence ids
    _step: dict[int, int] = field(default_factory=dict)  # request → tokens this step
    _open: dict[int, _Span] = field(default_factory=dict)  # request → its open span
    _rows: list[tuple[int, ...]] = field(default_factory=list)  # finished requests' branches

    def start(self, request_id: int) -> None:
        self.branches[request_id] = _Branch(request_id, 0, -1, 0)
        self.by_request[request_id] = [request_id]

    def fork(self, parent_id: int, child_id: int) -> int:
        """`child_id` forked from `parent_id` after its newest token; returns its index."""
        parent = self.branches[parent_id]
        siblings = self.by_request[parent.owner]
        child = _Branch(parent.owner, len(siblings), parent.index, parent.tokens)
        self.branches[child_id] = child
        siblings.append(child_id)
        return child.index

    def owner(self, sequence_id: int) -> int:
        return self.branches[sequence_id].owner

    def own_tokens(self, sequence_id: int) -> int:
        return self.branches[sequence_id].tokens

    def emit(self, sequence_id: int, replica: int, step: int, tokens: int = 1) -> None:
        branch = self.branches[sequence_id]
        if branch.first_step < 0:
            branch.first_step = step
        branch.tokens += tokens
        branch.steps += 1
        branch.last_step = step
        branch.replica = replica
        self._step[branch.owner] = self._step.get(branch.owner, 0) + tokens

    def close_step(self, replica: int, step: int) -> None:
        """Write the step's emissions: one per request that emitted in it."""
        for request_id, tokens in self._step.items():
            span = self._open.get(request_id)
            if span is not None and (span.replica, span.last_step + 1, span.tokens) == (
                replica,
                step,
                tokens,
            ):
                span.last_step = step
                continue
            if span is not None:
                self._write(request_id, span)
            self._open[request_id] = _Span(replica, step, step, tokens)
        self._step.clear()

    def finish(self, request_id: int, answer_tokens: list[int]) -> int:
        """The request ended (after its last `close_step`): keep its tree, with the answer
        tokens of each branch (in branch order); returns its emitted tokens."""
        span = self._open.pop(request_id, None)
        if span is not None:
            self._write(request_id, span)
        total = 0
        for sid, answer in zip(self.by_request.pop(request_id), answer_tokens, strict=True):
            b = self.branches.pop(sid)
            total += b.tokens
            self._rows.append(
                (
                    b.owner,
                    b.index,
                    b.parent,
                    b.fork_at,
                    b.tokens,
                    answer,
                    b.first_step,
                    b.last_step,
                    b.replica,
                    b.steps,
                )
            )
        return total

    def tree_shape(self, request_id: int) -> tuple[list[int], list[int], list[int]]:
        """(parent, fork_at, tokens) per branch of a live request, in branch order."""
        rows = [self.branches[s] for s in self.by_request[request_id]]
        return [b.parent for b in rows], [b.fork_at for b in rows], [b.tokens for b in rows]

    def _write(self, request_id: int, span: _Span) -> None:
        self.recorder.span(request_id, span.replica, span.first_step, span.last_step, span.tokens)

    def records(self) -> BranchRecords:
        rows = np.array(self._rows, dtype=np.int64).reshape(-1, 10)  # (b, 10)
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
        return BranchRecords(
            request_id=rows[:, 0],
            branch=rows[:, 1].astype(np.int32),
            parent=rows[:, 2].astype(np.int32),
            fork_at=rows[:, 3],
            tokens=rows[:, 4],
            answer_tokens=rows[:, 5],
            first_step=rows[:, 6],
            last_step=rows[:, 7],
            replica=rows[:, 8].astype(np.int32),
            steps=rows[:, 9],
        )


def reassemble(tree: BranchTree, own: list[list[int]], skip: set[int]) -> list[int]:
    """The answer as one sequence: an in-order walk of the tree (a branch's own tokens up to
    a fork, that child's text, then the branch's continuation), leaving out the tokens in
    `skip` (fork tokens, EOS). own[i]: branch i's own tokens in order."""
    children = tree.children_by_fork()

    def walk(branch: int) -> list[int]:
        out: list[int] = []
        for position, token in enumerate(own[branch], start=1):
            if token not in skip:
                out.append(token)
            child = children.get((branch, position))
            if child is not None:
                out += walk(child)
        return out

    return walk(0)
