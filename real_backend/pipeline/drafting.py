"""PipeInfer's drafting rule on the head's draft model: a token tree per speculative run.

Branches draft level by level, one batched draft forward per level, each branch in its own
draft sequence (forked at its split, so siblings never see each other). A branch stops when
the draft's top probability falls under `p_accept`; it splits off a sibling for each next
candidate above `p_split` (up to `max_branches`); the tree stops at `max_tokens` nodes or
`max_depth` levels. Both thresholds already include PipeInfer's `p_adjust`.

The draft's main sequence keeps its KV between runs: drafting from a context that extends
what it cached (a chain continuing the previous run's main branch, or the committed tokens
after the drafts were right) feeds only the missing tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from real_backend.model.transformer import SeqStep, Transformer

CANDIDATES = 8  # draft candidates looked at per branch and level (PipeInfer's 8)
MAIN = 0  # the draft sequence of the main branch


@dataclass
class DraftLimits:
    max_tokens: int
    max_depth: int
    max_branches: int
    p_accept: float  # p_accept + p_adjust
    p_split: float  # p_split + p_adjust


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int]  # -1: after the context's last token
    main_length: int  # nodes 0..main_length-1: the main branch, a chain


class DraftSource(Protocol):
    """What the head drafts with: the draft model, or a scripted source in tests."""

    def start(self, prompt: list[int]) -> None:
        """A new request begins with `prompt`."""

    def draft(self, context: list[int], limits: DraftLimits) -> DraftTree:
        """A tree continuing `context` (empty when no branch passes `p_accept`)."""


@dataclass
class _Branch:
    seq: int
    node: int  # its newest node, -1 before its first
    drafting: bool = True


class ModelDrafter:
    def __init__(self, model: Transformer, num_blocks: int, block_size: int) -> None:
        self.model = model
        self.cache = model.new_cache(num_blocks, block_size)
        self.cached: list[int] = []  # the tokens in the main sequence's KV
        self._root: tuple[list[int], torch.Tensor, torch.Tensor] | None = None

    def start(self, prompt: list[int]) -> None:
        for seq in list(self.cache.tables):
            self.cache.free(seq)
        self.cache.allocate(MAIN)
        self.cached, self._root = [], None

    @torch.inference_mode()
    def draft(self, context: list[int], limits: DraftLimits) -> DraftTree:
        if limits.max_tokens <= 0 or limits.max_depth <= 0:
            return DraftTree([], [], 0)
        tokens: list[int] = []
        parents: list[int] = []
        owner: list[int] = []  # branch index of each node
        branches = [_Branch(MAIN, -1)]
        candidates = {0: self._root_candidates(context)}
        for depth in range(limits.max_depth):
            for b in [i for i, br in enumerate(branches) if br.drafting]:
                self._extend(b, branches, candidates[b], limits, tokens, parents, owner)
            drafting = [i for i, br in enumerate(branches) if br.drafting]
            if not drafting or len(tokens) >= limits.max_tokens or depth + 1 >= limits.max_depth:
                break
            candidates = self._next_candidates(branches, drafting, tokens)
        for br in branches[1:]:
            self.cache.free(br.seq)
        return _main_first(tokens, parents, owner)

    def _extend(
        self,
        b: int,
        branches: list[_Branch],
        top: tuple[torch.Tensor, torch.Tensor],
        limits: DraftLimits,
        tokens: list[int],
        parents: list[int],
        owner: list[int],
    ) -> None:
        """Branch b's next level: stop under p_accept, split for candidates above p_split."""
        probs, ids = top
        branch = branches[b]
        if float(probs[0]) < limits.p_accept or len(tokens) >= limits.max_tokens:
            branch.drafting = False
            return
        takers = [b]
        for f in range(1, len(probs)):
            room = len(tokens) + len(takers) < limits.max_tokens
            if (
                len(branches) >= limits.max_branches
                or not room
                or float(probs[f]) <= limits.p_split
            ):
                break
            sibling = _Branch(self._free_seq_id(branches), branch.node)
            self.cache.fork(branch.seq, sibling.seq)
            branches.append(sibling)
            takers.append(len(branches) - 1)
        for f, taker in enumerate(takers):
            tokens.append(int(ids[f]))
            parents.append(branches[taker].node)
            owner.append(taker)
            branches[taker].node = len(tokens) - 1

    def _root_candidates(self, context: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The draft's top candidates after `context`; the main sequence then holds it."""
        if self._root is not None and self._root[0] == context and self._holds(context):
            self.cache.truncate(MAIN, len(context))
            self.cached = list(context)
            return self._root[1], self._root[2]
        keep = min(_common_prefix(self.cached, context), len(context) - 1)
        self.cache.truncate(MAIN, keep)
        (logits,) = self.model.step(self.cache, [SeqStep(MAIN, context[keep:])], last_only=True)
        self.cached = list(context)
        probs, ids = _top(logits[-1])
        self._root = (list(context), probs, ids)
        return probs, ids

    def _holds(self, context: list[int]) -> bool:
        return len(self.cached) >= len(context) and self.cached[: len(context)] == context

    def _next_candidates(
        self, branches: list[_Branch], drafting: list[int], tokens: list[int]
    ) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Feed each drafting branch its newest token; its top candidates after it."""
        steps = [SeqStep(branches[b].seq, [tokens[branches[b].node]]) for b in drafting]
        logits = self.model.step(self.cache, steps, last_only=True)  # each (1, V)
        if branches[0].drafting:
            self.cached.append(tokens[branches[0].node])
        return {b: _top(row[-1]) for b, row in zip(drafting, logits, strict=True)}

    def _free_seq_id(self, branches: list[_Branch]) -> int:
        return max(br.seq for br in branches) + 1


def _top(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities, token ids) of the likeliest candidates, best first."""
    probs = torch.softmax(logits.float(), -1)  # (V,)
    return probs.topk(min(CANDIDATES, probs.shape[-1]))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _main_first(tokens: list[int], parents: list[int], owner: list[int]) -> DraftTree:
    """Reorder the nodes so that the main branch (branch 0) comes first, as a chain."""
    order = [i for i in range(len(tokens)) if owner[i] == 0]
    order += [i for i in range(len(tokens)) if owner[i] != 0]
    new_index = {old: new for new, old in enumerate(order)}
    return DraftTree(
        tokens=[tokens[i] for i in order],
        parents=[-1 if parents[i] < 0 else new_index[parents[i]] for i in order],
        main_length=sum(1 for o in owner if o == 0),
    )
