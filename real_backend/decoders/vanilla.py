"""Vanilla decoding: one forward, one token per sequence."""

from __future__ import annotations

from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.sampling import next_tokens
from workbench.scenario.decoders import SamplingConfig


class VanillaDecoder(Decoder):
    def __init__(self, model: Transformer, cache: PagedKVCache, sampling: SamplingConfig) -> None:
        self.model = model
        self.cache = cache
        self.sampling = sampling

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        steps = [SeqStep(r.request_id, [r.tokens[-1]]) for r in batch]
        logits = self.model.step_last(self.cache, steps)  # (B, V)
        tokens = next_tokens(logits, self.sampling, [r.generator for r in batch])
        emitted = [[token] for token in tokens]
        return DecodeOutcome(emitted, verified=len(batch), accepted_per_request=[0] * len(batch))
