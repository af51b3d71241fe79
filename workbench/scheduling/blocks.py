"""Paged-KV block arithmetic shared by the policies."""

from __future__ import annotations

import numpy as np


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold `tokens` KV entries."""
    return -(-tokens // block_size)


def decode_block_demand(residue_counts: np.ndarray, first_step: int, n_steps: int) -> np.ndarray:
    """New blocks needed by each of `n_steps` decode steps of a fixed decode set.

    A decoding sequence with `c` cached tokens needs a new block exactly when
    `c % block_size == 0`; with the replica step counter `D`, that is when
    `D % block_size` equals the sequence's residue. `residue_counts[r]` counts the sequences
    of residue `r`, so step `D` needs `residue_counts[D % block_size]` blocks.
    """
    block_size = len(residue_counts)
    idx = (first_step + np.arange(n_steps)) % block_size  # (n_steps,)
    return residue_counts[idx]


def steps_within_budget(demand: np.ndarray, free_blocks: int) -> int:
    """How many leading steps of `demand` fit in `free_blocks` (cumulatively)."""
    used = np.cumsum(demand)  # (n_steps,)
    return int(np.searchsorted(used, free_blocks, side="right"))
