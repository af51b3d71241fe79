"""Choosing the next token from logits: greedy, or temperature / top-k / top-p sampling."""

from __future__ import annotations

import torch

from workbench.scenario.system import VanillaDecoderConfig


def request_generator(seed: int, request_id: int) -> torch.Generator:
    """Each request samples from its own stream, so batching never changes its draws."""
    generator = torch.Generator()
    generator.manual_seed((seed * 1_000_003 + request_id) % (2**63))
    return generator


def next_token(logits: torch.Tensor, cfg: VanillaDecoderConfig, generator: torch.Generator) -> int:
    """One token from `logits` (vocab,)."""
    if cfg.temperature == 0:
        return int(torch.argmax(logits))
    scores = logits.float() / cfg.temperature  # (V,)
    if cfg.top_k:
        kth = torch.topk(scores, min(cfg.top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if cfg.top_p < 1:
        sorted_scores, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(sorted_scores, -1).cumsum(-1)
        drop = cumulative - torch.softmax(sorted_scores, -1) >= cfg.top_p  # keep the first past p
        scores = scores.scatter(0, order[drop], float("-inf"))
    probs = torch.softmax(scores, -1)
    return int(torch.multinomial(probs, 1, generator=generator))
