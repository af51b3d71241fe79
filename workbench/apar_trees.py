"""APAR request trees: which branch forked from which, where, and how long each ran.

Branch 0 is the request's root; branch i > 0 forked from `parent[i]` < i when that parent
had emitted `fork_at[i]` tokens of its own (its fork token the last of them). Each branch
emitted `tokens[i]` tokens of its own (its fork tokens and a final EOS included; the child
token it starts with is not emitted but forced), of which `answer_tokens[i]` enter the
reassembled answer (fork tokens and EOS left out). A real run records these per request; the
simulator replays them or draws them from parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BranchTree:
    parent: tuple[int, ...]  # (b,) -1 for the root
    fork_at: tuple[int, ...]  # (b,) the parent's own tokens at the fork; 0 for the root
    tokens: tuple[int, ...]  # (b,) own tokens emitted
    answer_tokens: tuple[int, ...]  # (b,) own tokens in the reassembled answer

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(f"invalid branch tree: {problem}")

    @classmethod
    def single(cls, tokens: int, answer_tokens: int | None = None) -> BranchTree:
        """A request that never forked."""
        answer = tokens if answer_tokens is None else answer_tokens
        return cls((-1,), (0,), (tokens,), (answer,))

    @property
    def branches(self) -> int:
        return len(self.parent)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)

    @property
    def total_answer_tokens(self) -> int:
        return sum(self.answer_tokens)

    def depth(self, branch: int) -> int:
        """1 for the root, its parent's + 1 for a child."""
        depth = 1
        while self.parent[branch] >= 0:
            branch = self.parent[branch]
            depth += 1
        return depth

    def children_by_fork(self) -> dict[tuple[int, int], int]:
        """(parent, fork_at) → child: a branch forks at most once per token."""
        return {(self.parent[c], self.fork_at[c]): c for c in range(1, self.branches)}

    def context_start(self, prompt_tokens: int) -> np.ndarray:
        """(b,) visible context of each branch before its first own token: the prompt, plus
        for a child its parent's context up to its fork token and the child token."""
        start = np.zeros(self.branches, dtype=np.int64)
        start[0] = prompt_tokens
        for child in range(1, self.branches):
            start[child] = start[self.parent[child]] + self.fork_at[child] + 1
        return start

    def problem(self) -> str | None:
        n = len(self.parent)
        if not n or any(len(c) != n for c in (self.fork_at, self.tokens, self.answer_tokens)):
            return "columns of different lengths (or none)"
        if self.parent[0] != -1 or self.fork_at[0] != 0:
            return "branch 0 must be the root (parent -1, fork_at 0)"
        if any(t < 1 for t in self.tokens):
            return "every branch emits a token"
        if any(not 0 <= a <= t for a, t in zip(self.answer_tokens, self.tokens, strict=True)):
            return "answer tokens must lie within each branch's tokens"
        for child in range(1, n):
            parent, at = self.parent[child], self.fork_at[child]
            if not 0 <= parent < child:
                return f"branch {child}'s parent must be an earlier branch"
            if not 1 <= at < self.tokens[parent]:
                return f"branch {child} forks where its parent has no token after the fork"
        if len(self.children_by_fork()) != n - 1:
            return "two branches fork at the same token"
        return None
