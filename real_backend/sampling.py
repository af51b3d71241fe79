"""Choosing the next token from logits: greedy, or temperature / top-k / top-p sampling."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernels.greedy import greedy_tokens
from real_backend.host_to_device import device_tensor
from workbench.scenario.decoders import SamplingConfig


def request_generator(seed: int, request_id: int) -> torch.Generator:
    """Each request samples from its own stream, so batching never changes its draws."""
    generator = torch.Generator()
    generator.manual_seed((seed * 1_000_003 + request_id) % (2**63))
    return generator


def next_token(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> int:
    """One token from `logits` (vocab,)."""
    if cfg.temperature == 0:
        return int(greedy_tokens(logits))
    return int(torch.multinomial(token_probs(logits, cfg), 1, generator=generator))


def next_tokens(
    logits: torch.Tensor,  # (B, V)
    cfg: SamplingConfig,
    generators: Sequence[torch.Generator],
    banned: Sequence[Sequence[int]] = (),  # per row: tokens it may not emit
) -> list[int]:
    """One token per row, as `next_token` would choose it row by row (ties to the lowest id
    alike). Greedy takes one batched choice and one device sync for the whole batch, where
    choosing row by row costs a kernel launch and a sync per sequence on a GPU."""
    if any(banned):
        rows = [b for b, tokens in enumerate(banned) for _ in tokens]
        cols = [t for tokens in banned for t in tokens]
        logits = logits.clone()  # the caller's logits stay as they were
        index = device_tensor([rows, cols], logits.device)  # (2, n): one copy for both
        logits[index[0], index[1]] = float("-inf")
    if cfg.temperature == 0:
        return greedy_tokens(logits).tolist()
    return [next_token(row, cfg, g) for row, g in zip(logits, generators, strict=True)]


def token_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """The sampling distribution (..., V) after temperature, top-k and top-p (temperature > 0)."""
    scores = logits.float() / cfg.temperature  # (..., V)
    if cfg.top_k:
        kth = torch.topk(scores, min(cfg.top_k, scores.shape[-1]), dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if cfg.top_p < 1:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_scores, -1)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= cfg.top_p  # keep the first past p
        scores = scores.scatter(-1, order, sorted_scores.masked_fill(drop, float("-inf")))
    return torch.softmax(scores, -1)
