"""A decoder that computes what a verification step computes, to time it.

Speculative and lookahead decoders send each decoding sequence's newest token plus `width`
more through one target forward, then roll the cache back to what they emit. This probe
does exactly that with a chain of `width` copies of the newest token, keeps the real next
token (row 0) and rolls the extra tokens back, so a step costs the target's verification
forward and its cache bookkeeping; the draft model's own cost is not part of it.
"""

from __future__ import annotations

from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.sampling import next_token
from workbench.scenario.decoders import SamplingConfig


class VerifyWidthProbe(Decoder):
    def __init__(
        self, model: Transformer, cache: PagedKVCache, sampling: SamplingConfig, width: int
    ) -> None:
        self.model = model
        self.cache = cache
        self.sampling = sampling
        self.width = width
        self.lookahead_slots = width

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        chains = [SeqStep(r.request_id, [r.tokens[-1]] * (1 + self.width)) for r in batch]
        logits = self.model.step(self.cache, chains)  # B × (1 + width, V)
        emitted = []
        for r, rows in zip(batch, logits, strict=True):
            self.cache.truncate(r.request_id, self.cache.lengths[r.request_id] - self.width)
            emitted.append([next_token(rows[0], self.sampling, r.generator)])
        verified = len(batch) * (1 + self.width)
        return DecodeOutcome(emitted, verified=verified, accepted_per_request=[0] * len(batch))
