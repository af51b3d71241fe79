"""A decoder that computes what a verification step computes, to time it.

Speculative and lookahead decoders send each decoding sequence's newest token plus `width`
more through one target forward, decide in one verification kernel what to accept, then roll
the cache back to what they emit. This probe does exactly that with a chain of `width`
copies of the newest token: the same causal forward and greedy verification as a speculative
chain, then it keeps one token (the target's after the newest) and rolls the extra tokens
back, so a step costs the target's verification and its bookkeeping; the draft model's own
cost is not part of it. Greedy by construction: calibration decodes greedily.
"""

from __future__ import annotations

from real_backend.decoders.acceptance import greedy_decisions
from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer


class VerifyWidthProbe(Decoder):
    def __init__(self, model: Transformer, cache: PagedKVCache, width: int) -> None:
        self.model = model
        self.cache = cache
        self.width = width
        self.lookahead_slots = width

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        copies = [[r.tokens[-1]] * self.width for r in batch]
        chains = [
            SeqStep(r.request_id, [r.tokens[-1], *c]) for r, c in zip(batch, copies, strict=True)
        ]
        logits = self.model.step(self.cache, chains)  # B × (1 + width, V)
        decisions = greedy_decisions(self.model.kernel_set(), copies, logits, None)
        emitted = []
        for r, (path, bonus) in zip(batch, decisions, strict=True):
            self.cache.truncate(r.request_id, self.cache.lengths[r.request_id] - self.width)
            emitted.append([r.tokens[-1] if path else bonus])  # a matched copy is that token
        verified = len(batch) * (1 + self.width)
        return DecodeOutcome(emitted, verified=verified, accepted_per_request=[0] * len(batch))
