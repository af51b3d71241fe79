"""What the head reads: the frozen served model's final hidden state of each prompt.

One prefill of the prompt through our own `Transformer` (`hidden_states`: the final norm's
output, the LM head's input), pooled two ways: the mean over the prompt's tokens, or the
last token's (the state the first answer token is chosen from). `train` keeps the better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from real_backend.model.transformer import SeqStep, Transformer
from workbench.scheduling.blocks import blocks_for

Pooling = Literal["mean", "last"]
POOLINGS: tuple[Pooling, ...] = ("mean", "last")
BLOCK_SIZE = 16
BATCH_TOKENS = 8192  # prompt tokens per forward (similar lengths together: little padding)


@dataclass(frozen=True)
class PromptFeatures:
    mean: torch.Tensor  # (n, dim) float32
    last: torch.Tensor  # (n, dim) float32

    def get(self, pooling: Pooling) -> torch.Tensor:
        return self.mean if pooling == "mean" else self.last


def prompt_features(model: Transformer, prompts: list[list[int]]) -> PromptFeatures:
    """Both poolings of every prompt's final hidden states, in prompt order."""
    if any(not ids for ids in prompts):
        raise ValueError("a prompt without tokens has no hidden state")
    dim = model.args.dim
    mean, last = torch.zeros(len(prompts), dim), torch.zeros(len(prompts), dim)
    for batch in _batches(prompts):
        blocks = sum(blocks_for(len(prompts[i]), BLOCK_SIZE) for i in batch)
        cache = model.new_cache(blocks, BLOCK_SIZE)  # this batch's prompts only, then dropped
        plan = [SeqStep(i, prompts[i]) for i in batch]
        for i, states in zip(batch, model.hidden_states(cache, plan), strict=True):  # (n_i, dim)
            mean[i], last[i] = states.mean(0).cpu(), states[-1].cpu()
    return PromptFeatures(mean, last)


def _batches(prompts: list[list[int]]) -> list[list[int]]:
    """Prompt indices by length, cut so that a batch's padded size stays within the budget."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches: list[list[int]] = []
    for i in order:
        batch = batches[-1] if batches else None
        if batch is not None and len(prompts[i]) * (len(batch) + 1) <= BATCH_TOKENS:
            batch.append(i)
        else:
            batches.append([i])
    return batches
