"""Prompt token ids for a workload: its real prompts, or synthetic ids of the drawn lengths."""

from __future__ import annotations

import numpy as np

from workbench.errors import WorkbenchError
from workbench.seeding import component_rng
from workbench.workload.requests import Workload


def synthetic_prompts(
    prompt_tokens: np.ndarray, vocab_size: int, seed: int, avoid: set[int] | None = None
) -> list[list[int]]:
    """Uniform random ids (never one in `avoid`, e.g. EOS), one list per request."""
    rng = component_rng(seed, "workload.prompt_ids")
    avoid = avoid or set()
    allowed = np.array([i for i in range(vocab_size) if i not in avoid])  # (V',)
    flat = allowed[rng.integers(0, len(allowed), int(prompt_tokens.sum()))]
    bounds = np.cumsum(prompt_tokens)[:-1]
    return [part.tolist() for part in np.split(flat, bounds)]


def request_prompts(
    workload: Workload, vocab_size: int, seed: int, eos: frozenset[int]
) -> list[list[int]]:
    """The workload's real prompts, else synthetic ids (never an EOS id) of the drawn lengths."""
    if workload.prompt_ids is None:
        return synthetic_prompts(workload.prompt_tokens, vocab_size, seed, set(eos))
    top = max(max(ids) for ids in workload.prompt_ids)
    if top >= vocab_size:
        raise WorkbenchError(
            f"prompt token id {top} is outside the model's vocabulary ({vocab_size} ids): "
            "the tokenizer is not the model's",
            field="workload.prompts.tokenizer",
        )
    return workload.prompt_ids
