"""Shared by the kernel tests: where the Triton kernels run, and random paged-attention inputs.

Without CUDA the kernels run under Triton's interpreter. Triton reads ``TRITON_INTERPRET`` when
it decorates functions, its own library's included, at its first import: so a test module calls
``kernel_device()`` before importing triton or any kernel module.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Literal

import torch

MaskKind = Literal["causal", "chain", "tree"]  # causal: tree_mask=None; chain: explicit causal

# Kernel vs the reference computed in fp32 from the same inputs.
TOLERANCES = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=3e-3, rtol=3e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}


def kernel_device() -> str:
    """ "cuda" on a GPU machine; else "cpu", with Triton's interpreter on for this process."""
    if torch.cuda.is_available():
        return "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return "cpu"


def tree_mask_from_parents(parents: list[int]) -> torch.Tensor:
    """(n, n) bool: row i = row parents[i] plus i (parent -1: the cached context)."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            mask[i] = mask[p]
        mask[i, i] = True
    return mask


def random_parents(gen: torch.Generator, n: int) -> list[int]:
    """A random tree over n tokens: parent[i] in [-1, i)."""
    return [int(torch.randint(-1, i, (1,), generator=gen)) if i else -1 for i in range(n)]


@dataclass
class PagedInputs:
    """Arguments of paged_tree_attention, in its order."""

    q: torch.Tensor  # (B, Q, nh, hd)
    k_cache: torch.Tensor  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # (B, max_blocks) int64, -1 past each sequence
    context_lens: torch.Tensor  # (B,)
    new_lens: torch.Tensor  # (B,)
    tree_mask: torch.Tensor | None  # (B, Q, Q) bool
    scale: float

    def args(self) -> tuple:
        return (self.q, self.k_cache, self.v_cache, self.block_tables, self.context_lens,
                self.new_lens, self.tree_mask, self.scale)  # fmt: skip

    def in_fp32(self) -> tuple:
        """The same arguments with q and the caches widened to fp32 (for the reference)."""
        return (self.q.float(), self.k_cache.float(), self.v_cache.float(), *self.args()[3:])


def _block_tables(gen: torch.Generator, lengths: list[int], block_size: int, num_blocks: int):
    """Each sequence's blocks drawn at random from the pool, -1 past its end."""
    need = [math.ceil(n / block_size) for n in lengths]
    free = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.full((len(lengths), max(max(need), 1) + 1), -1, dtype=torch.long)
    for b, n in enumerate(need):
        tables[b, :n] = torch.tensor([free.pop() for _ in range(n)], dtype=torch.long)
    return tables


def _masks(gen: torch.Generator, new_lens: list[int], kind: MaskKind) -> torch.Tensor | None:
    if kind == "causal":
        return None
    q_len = max(new_lens)
    masks = torch.zeros(len(new_lens), q_len, q_len, dtype=torch.bool)
    for b, n in enumerate(new_lens):
        parents = random_parents(gen, n) if kind == "tree" else list(range(-1, n - 1))
        masks[b, :n, :n] = tree_mask_from_parents(parents)
    return masks


def random_paged_inputs(
    gen: torch.Generator,
    context_lens: list[int],
    new_lens: list[int],
    *,
    n_kv: int,
    group: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    mask: MaskKind,
    device: str,
) -> PagedInputs:
    """Random q and caches (spare blocks included), shuffled block tables, a mask of ``mask``."""
    lengths = [c + n for c, n in zip(context_lens, new_lens, strict=True)]
    num_blocks = sum(math.ceil(n / block_size) for n in lengths) + 3
    shape = (num_blocks, block_size, n_kv, head_dim)
    q_shape = (len(new_lens), max(new_lens), n_kv * group, head_dim)
    masks = _masks(gen, new_lens, mask)
    return PagedInputs(
        q=torch.randn(q_shape, generator=gen).to(device=device, dtype=dtype),
        k_cache=torch.randn(shape, generator=gen).to(device=device, dtype=dtype),
        v_cache=torch.randn(shape, generator=gen).to(device=device, dtype=dtype),
        block_tables=_block_tables(gen, lengths, block_size, num_blocks).to(device),
        context_lens=torch.tensor(context_lens, device=device),
        new_lens=torch.tensor(new_lens, device=device),
        tree_mask=None if masks is None else masks.to(device),
        scale=head_dim**-0.5,
    )
