"""Prompt token ids for a workload: synthetic ids of the drawn lengths, seeded."""

from __future__ import annotations

import numpy as np

from workbench.seeding import component_rng


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
