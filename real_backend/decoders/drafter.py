"""The draft model's side of speculative decoding: its own paged cache, chains and trees.

The draft cache lags the sequence: before each proposal the draft "catches up" on the
tokens it has not cached (the whole prompt the first time, then the tokens accepted since),
in the same forward that yields its first proposal. After verification it is rolled back to
the tokens that are still right, so nothing the draft computed validly is recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from real_backend.decoders.base import DecodeRequest, EmissionRules
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.sampling import next_tokens, token_probs
from workbench.records import DraftForward
from workbench.scenario.decoders import SamplingConfig, TreeConfig


@dataclass
class Draft:
    """Drafted nodes after the root (the last emitted token); a chain has parents i-1."""

    tokens: list[int]
    parents: list[int]  # index of the parent node, -1 = the root
    probs: torch.Tensor | None = None  # (n, V) draft distributions (sampled chains only)


class Drafter:
    def __init__(self, model: Transformer, cache: PagedKVCache, sampling: SamplingConfig) -> None:
        self.model = model
        self.cache = cache
        self.sampling = sampling
        self.forwards: list[DraftForward] | None = None  # a list: each forward's shape noted

    def take_forwards(self) -> list[DraftForward]:
        """The forwards noted since the last call (none unless noting)."""
        if self.forwards is None:
            return []
        taken, self.forwards = self.forwards, []
        return taken

    def _note(self, steps: list[SeqStep], cached: list[int]) -> None:
        if self.forwards is not None:
            self.forwards.append(tuple(zip([len(s.tokens) for s in steps], cached, strict=True)))

    def release(self, request_id: int) -> None:
        if request_id in self.cache.tables:
            self.cache.free(request_id)

    def fork(self, parent_id: int, child_id: int, shared_tokens: int) -> None:
        """A new branch's draft cache: its parent's, cut to the `shared_tokens` they share
        (or fewer, if the parent's lags); the branch catches up on the rest when it drafts."""
        if parent_id in self.cache.tables:
            self.cache.fork(parent_id, child_id)
            self.cache.truncate(child_id, min(shared_tokens, self.cache.length(child_id)))

    def rollback(self, request_id: int, valid_tokens: int) -> None:
        """Keep at most the first `valid_tokens` cached tokens (those still right)."""
        if request_id in self.cache.tables:
            self.cache.truncate(request_id, min(valid_tokens, self.cache.length(request_id)))

    def _pending(self, r: DecodeRequest) -> list[int]:
        cached = self.cache.length(r.request_id) if r.request_id in self.cache.tables else 0
        return r.tokens[cached:]

    # ------------------------------------------------------------------ chains

    def propose_chain(
        self, batch: list[DecodeRequest], lengths: list[int], rules: EmissionRules | None = None
    ) -> list[Draft]:
        """A chain of `lengths[b]` tokens per request, one draft forward per position; with
        `rules`, no banned token is drafted and a chain stops after a token ending emission."""
        drafts = [Draft([], []) for _ in batch]
        probs: list[list[torch.Tensor]] = [[] for _ in batch]
        feed = {b: self._pending(r) for b, r in enumerate(batch) if lengths[b] > 0}
        while feed:
            order = list(feed)
            steps = [SeqStep(batch[b].request_id, feed[b]) for b in order]
            if self.forwards is not None:
                self._note(steps, [self._cached(batch[b]) for b in order])
            logits = self.model.step_last(self.cache, steps)  # (len(order), V)
            banned = [self._banned(rules, batch[b], drafts[b]) for b in order]
            chosen = self._choose_rows(logits, [batch[b] for b in order], order, probs, banned)
            feed = {}
            for b, token in zip(order, chosen, strict=True):
                draft = drafts[b]
                draft.parents.append(len(draft.tokens) - 1)
                draft.tokens.append(token)
                ends = rules is not None and rules.ends_emission(token)
                if len(draft.tokens) < lengths[b] and not ends:
                    feed[b] = [token]
        for draft, p in zip(drafts, probs, strict=True):
            draft.probs = torch.stack(p) if p else None
        return drafts

    @staticmethod
    def _banned(rules: EmissionRules | None, r: DecodeRequest, draft: Draft) -> list[int]:
        if rules is None:
            return []
        previous = draft.tokens[-1] if draft.tokens else r.tokens[-1]
        return rules.banned(r, previous, len(draft.tokens))

    def _choose_rows(
        self,
        logits: torch.Tensor,  # (R, V)
        requests: list[DecodeRequest],
        rows: list[int],  # each row's index into `probs`
        probs: list[list[torch.Tensor]],
        banned: list[list[int]],
    ) -> list[int]:
        """Each row's draft token: greedy for all rows in one batched choice; sampled row by
        row, each distribution kept for the rejection rule."""
        if self.sampling.temperature == 0:
            return next_tokens(logits, self.sampling, [r.generator for r in requests], banned)
        return [
            self._sample(row, r, probs[b], ban)
            for row, r, b, ban in zip(logits, requests, rows, banned, strict=True)
        ]

    def _sample(
        self,
        logits: torch.Tensor,  # (V,)
        r: DecodeRequest,
        probs: list[torch.Tensor],
        banned: list[int],
    ) -> int:
        if banned:
            logits = logits.clone()
            logits[banned] = float("-inf")
        q = token_probs(logits, self.sampling)  # (V,)
        probs.append(q)
        return int(torch.multinomial(q, 1, generator=r.generator))

    # ------------------------------------------------------------------ trees

    def propose_tree(
        self, batch: list[DecodeRequest], tree: TreeConfig, depths: list[int]
    ) -> list[Draft]:
        """A greedy token tree per request, at most `depths[b]` deep, one forward per depth.

        Every forward feeds the uncached tokens plus the tree so far (the tree is small) and
        then drops the tree from the draft cache again, so siblings never see each other.
        """
        drafts = [Draft([], []) for _ in batch]
        scores = [[] for _ in batch]  # per node: product of draft probabilities on its path
        frontier = {b: [-1] for b in range(len(batch)) if depths[b] > 0}  # -1 = the root
        depth = 0
        while frontier:
            logits = self._tree_forward(batch, drafts, frontier)
            for b, rows in logits.items():
                self._expand(drafts[b], scores[b], frontier[b], rows, tree, depth)
            depth += 1
            frontier = {
                b: [j for j in range(len(drafts[b].tokens)) if self._depth(drafts[b], j) == depth]
                for b in frontier
                if depth < depths[b] and self._room(drafts[b], tree, depth)
            }
            frontier = {b: nodes for b, nodes in frontier.items() if nodes}
        return drafts

    def _tree_forward(
        self, batch: list[DecodeRequest], drafts: list[Draft], frontier: dict[int, list[int]]
    ) -> dict[int, torch.Tensor]:
        """Draft logits (len(frontier[b]), V) at each frontier node (-1 = root)."""
        order = list(frontier)
        steps, bases = [], []
        for b in order:
            r, draft = batch[b], drafts[b]
            pending = self._pending(r)
            root = len(pending) - 1
            parents = [*range(-1, root), *(root if p < 0 else root + 1 + p for p in draft.parents)]
            steps.append(SeqStep(r.request_id, pending + draft.tokens, parents))
            bases.append((self._cached(r), root))
        self._note(steps, [cached for cached, _ in bases])
        out = {}
        for b, step, (cached, root), logits in zip(
            order, steps, bases, self.model.step(self.cache, steps), strict=True
        ):
            rows = [root if j < 0 else root + 1 + j for j in frontier[b]]
            out[b] = logits[rows]  # (n_frontier, V)
            self.cache.truncate(step.seq, cached + root + 1)  # keep the context, drop the tree
        return out

    def _cached(self, r: DecodeRequest) -> int:
        return self.cache.length(r.request_id) if r.request_id in self.cache.tables else 0

    @staticmethod
    def _depth(draft: Draft, node: int) -> int:
        depth = 1
        while draft.parents[node] >= 0:
            node = draft.parents[node]
            depth += 1
        return depth

    @staticmethod
    def _room(draft: Draft, tree: TreeConfig, depth: int) -> bool:
        if tree.kind == "static":
            return depth < len(tree.branching)
        return depth < tree.max_depth and len(draft.tokens) < tree.max_nodes

    @staticmethod
    def _expand(
        draft: Draft,
        scores: list[float],
        nodes: list[int],
        logits: torch.Tensor,  # (len(nodes), V)
        tree: TreeConfig,
        depth: int,
    ) -> None:
        """Add the next level: static top-b children per node, or the likeliest paths."""
        probs = torch.softmax(logits.float(), -1)  # (n, V)
        width = tree.branching[depth] if tree.kind == "static" else tree.top_k
        top_p, top_t = probs.topk(width, dim=-1)  # (n, width)
        candidates = [
            ((scores[node] if node >= 0 else 1.0) * float(top_p[i, c]), node, int(top_t[i, c]))
            for i, node in enumerate(nodes)
            for c in range(width)
        ]
        if tree.kind == "dynamic":  # keep the likeliest within the node budget
            candidates.sort(key=lambda c: -c[0])
            candidates = candidates[: min(tree.top_k, tree.max_nodes - len(draft.tokens))]
        for score, parent, token in candidates:
            draft.tokens.append(token)
            draft.parents.append(parent)
            scores.append(score)
