"""Vanilla decoding: one forward, one token per sequence."""

from __future__ import annotations

from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.sampling import next_token
from workbench.scenario.decoders import SamplingConfig


class VanillaDecoder(Decoder):
    def __init__(self, model: Transformer, cache: PagedKVCache, sampling: SamplingConfig) -> None:
        self.model = model
        self.cache = cache
        self.sampling = sampling

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        steps = [SeqStep(r.request_id, [r.tokens[-1]]) for r in batch]
        logits = self.model.step(self.cache, steps, last_only=True)  # B × (1, V)
        emitted = [
            [next_token(row[-1], self.sampling, r.generator)]
            for r, row in zip(batch, logits, strict=True)
        ]
        return DecodeOutcome(emitted, verified=len(batch), accepted_per_request=[0] * len(batch))
