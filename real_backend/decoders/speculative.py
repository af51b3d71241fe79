"""Speculative decoding: a draft model proposes, the target verifies in one forward.

Per step and sequence: the draft proposes a chain of k tokens (or a token tree); the target
runs the last emitted token plus the proposal in one forward (a chain on the causal path, a
tree with its tree mask); the rule below accepts a prefix (a root-to-node path) and adds the
target's own next token; the target cache keeps exactly the accepted tokens, the draft cache
the still-valid ones.

With emission rules (APAR's branches): banned tokens are masked out of the draft's and the
target's logits alike, so what is accepted is what greedy decoding under the rules emits; a
token that ends emission (APAR's fork) ends the draft's chain and, once accepted, the step's
emission (no bonus token after it).
"""

from __future__ import annotations

import time

import torch

from real_backend.decoders.acceptance import accept_rejection_sampling, greedy_decisions
from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest, EmissionRules
from real_backend.decoders.drafter import Draft, Drafter
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.sampling import token_probs
from workbench.scenario.decoders import SpeculativeDecoderConfig
from workbench.scheduling.adaptive_draft import AdaptiveDraftLength


class SpeculativeDecoder(Decoder):
    def __init__(
        self,
        model: Transformer,
        cache: PagedKVCache,
        drafter: Drafter,
        config: SpeculativeDecoderConfig,
        rules: EmissionRules | None = None,
    ) -> None:
        if rules is not None and config.tree is not None:
            raise ValueError("emission rules apply to chain drafts")
        self.model = model
        self.cache = cache
        self.drafter = drafter
        self.config = config
        self.rules = rules
        self.lookahead_slots = config.max_draft_tokens
        self.adaptive = (
            None
            if config.adaptive is None
            else AdaptiveDraftLength(config.num_speculative_tokens, config.adaptive)
        )

    def release(self, request_id: int) -> None:
        self.drafter.release(request_id)
        if self.adaptive is not None:
            self.adaptive.release(request_id)

    def draft_caches(self) -> list[tuple[Transformer, int]]:
        return [(self.drafter.model, self.drafter.cache.block_size)]

    def note_draft_forwards(self) -> None:
        self.drafter.forwards = []

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        return self.decode_with(batch, [])[0]

    def decode_with(
        self, batch: list[DecodeRequest], others: list[SeqStep]
    ) -> tuple[DecodeOutcome, list[torch.Tensor]]:
        """One step for `batch`, with `others` (e.g. APAR's fork chunks) in the same target
        forward; returns the outcome and the others' logits."""
        start_s = time.perf_counter()
        drafts = self._propose(batch)  # ends on the host: each forward's tokens are read back
        draft_s = time.perf_counter() - start_s
        steps = [
            SeqStep(r.request_id, [r.tokens[-1], *d.tokens], self._step_parents(d))
            for r, d in zip(batch, drafts, strict=True)
        ]
        contexts = [self.cache.length(r.request_id) for r in batch]
        everything = self.model.step(self.cache, steps + others)
        decisions = self._decide(batch, drafts, everything[: len(batch)])
        outcome = DecodeOutcome(emitted=[], draft_s=draft_s)
        outcome.draft_forwards = self.drafter.take_forwards()
        for args in zip(batch, drafts, contexts, decisions, strict=True):
            self._settle(outcome, *args)
        return outcome, everything[len(batch) :]

    def _decide(
        self,
        batch: list[DecodeRequest],
        drafts: list[Draft],
        logits: list[torch.Tensor],  # each (1 + n_b, V)
    ) -> list[tuple[list[int], int]]:
        """Per sequence (accepted node indices, the target's next token)."""
        if not batch:  # only others (APAR's fork chunks) in this forward
            return []
        if self.rules is not None:
            logits = [self._obey(*args) for args in zip(batch, drafts, logits, strict=True)]
        if self.config.temperature > 0:
            return [self._accept_sampled(*args) for args in zip(batch, drafts, logits, strict=True)]
        return self._accept_greedy(drafts, logits)

    def _settle(
        self,
        outcome: DecodeOutcome,
        r: DecodeRequest,
        draft: Draft,
        context: int,
        decision: tuple[list[int], int],
    ) -> None:
        """Emit the accepted tokens (and the bonus), roll both caches back to what stays."""
        path, bonus = decision
        emitted = [draft.tokens[j] for j in path]
        ends = self._ends_emission(emitted)
        cached = path[:-1] if ends else path  # an emission's last token is never cached
        self.cache.keep(r.request_id, context, [0, *(j + 1 for j in cached)])
        self.drafter.rollback(r.request_id, self._draft_valid(r, draft, path))
        outcome.emitted.append(emitted if ends else [*emitted, bonus])
        outcome.accepted_per_request.append(len(path))
        outcome.drafted += len(draft.tokens)
        outcome.accepted += len(path)
        outcome.verified += 1 + len(draft.tokens)
        self._remember(r.request_id, len(path))

    # ------------------------------------------------------------------ drafting

    def _propose(self, batch: list[DecodeRequest]) -> list[Draft]:
        limits = [r.max_new - 1 for r in batch]  # drafts past the length limit are wasted
        if self.config.tree is not None:
            return self.drafter.propose_tree(batch, self.config.tree, limits)
        lengths = [
            min(self._draft_length(r.request_id), cap) for r, cap in zip(batch, limits, strict=True)
        ]
        return self.drafter.propose_chain(batch, lengths, self.rules)

    def _draft_length(self, request_id: int) -> int:
        """k, or with `adaptive`: one more than the recent mean accepted, within bounds."""
        if self.adaptive is None:
            return self.config.num_speculative_tokens
        return self.adaptive.length(request_id)

    def _remember(self, request_id: int, accepted: int) -> None:
        if self.adaptive is not None:
            self.adaptive.remember(request_id, accepted)

    # ------------------------------------------------------------------ verification

    def _step_parents(self, draft: Draft) -> list[int] | None:
        """The step's parents for the root and the draft: None for a chain (the causal mask,
        the plain path), the tree's parents otherwise."""
        if self.config.tree is None:
            return None
        return [-1, *(p + 1 for p in draft.parents)]

    def _ends_emission(self, emitted: list[int]) -> bool:
        return self.rules is not None and bool(emitted) and self.rules.ends_emission(emitted[-1])

    def _obey(
        self,
        r: DecodeRequest,
        draft: Draft,
        logits: torch.Tensor,  # (1 + n, V): after the root and each drafted token of a chain
    ) -> torch.Tensor:
        """`logits` with the tokens the rules ban at each position impossible."""
        assert self.rules is not None
        out = logits.clone()
        previous = [r.tokens[-1], *draft.tokens]
        for i in range(out.shape[0]):
            banned = self.rules.banned(r, previous[i], i)
            if banned:
                out[i, banned] = float("-inf")
        return out

    def _accept_greedy(
        self, drafts: list[Draft], logits: list[torch.Tensor]
    ) -> list[tuple[list[int], int]]:
        """Per sequence (accepted node indices, the target's next token): see
        `greedy_decisions`; a chain verifies without parents."""
        parents = None if self.config.tree is None else _tree_parents(drafts)
        tokens = [d.tokens for d in drafts]
        return greedy_decisions(self.model.kernel_set(), tokens, logits, parents)

    def _accept_sampled(
        self,
        r: DecodeRequest,
        draft: Draft,
        logits: torch.Tensor,  # (1 + n, V)
    ) -> tuple[list[int], int]:
        """Rejection sampling over a drafted chain (see `accept_rejection_sampling`)."""
        p = token_probs(logits, self.config)  # (1 + n, V)
        n, token = accept_rejection_sampling(p, draft.probs, draft.tokens, r.generator)
        return list(range(n)), token

    def _draft_valid(self, r: DecodeRequest, draft: Draft, path: list[int]) -> int:
        """Draft-cache tokens still right: the old tokens plus the accepted drafted tokens the
        draft itself cached (a chain caches all but its last; a tree caches none)."""
        if self.config.tree is not None:
            return len(r.tokens)
        return len(r.tokens) + min(len(path), max(len(draft.tokens) - 1, 0))


def _tree_parents(drafts: list[Draft]) -> torch.Tensor:
    """(B, T) int64: each node's parent node (the root's entry is unused), T the most nodes."""
    n_nodes = 1 + max(len(d.tokens) for d in drafts)
    parents = torch.zeros(len(drafts), n_nodes, dtype=torch.long)
    for b, d in enumerate(drafts):
        parents[b, 1 : 1 + len(d.parents)] = torch.tensor(d.parents, dtype=torch.long) + 1
    return parents
