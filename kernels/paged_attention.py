"""PyTorch reference for paged attention with an intra-step tree mask, and its cache helpers.

These three functions are the contract the Triton kernels implement with the same signatures;
on CPU the runner calls these references directly. This module imports nothing from the project.

Layout (chosen for a simple kernel grid over batch x heads x query tiles):

* Paged caches, one pair per layer: ``k_cache``/``v_cache`` of shape
  ``(num_blocks, block_size, n_kv_heads, head_dim)``. Slot ``s`` is block ``s // block_size``,
  offset ``s % block_size``; ``k_cache.view(-1, n_kv_heads, head_dim)[s]`` is that slot.
* Queries are **padded** per sequence: ``q`` is ``(B, Q, n_heads, head_dim)`` with ``Q`` the
  largest number of new tokens in the step; sequence ``b`` uses the first ``new_lens[b]`` rows.
  Padded rows produce zeros.
* The new tokens' K/V are already written in the cache, at the positions
  ``context_lens[b] .. context_lens[b] + new_lens[b] - 1`` of sequence ``b``. So a new token
  attends to the ``context_lens[b]`` cached tokens, and to new token ``j`` where
  ``tree_mask[b, i, j]`` is true (``None`` means causal among the new tokens). A mask row must
  include its own token (the diagonal), or a token with no context would see nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["copy_blocks", "paged_tree_attention", "write_kv"]


def write_kv(
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    k: torch.Tensor,  # (N, n_kv, hd)
    v: torch.Tensor,  # (N, n_kv, hd)
    slot_mapping: torch.Tensor,  # (N,) int64 flat slot per token; < 0 = padding, skipped
) -> None:
    """Scatter the K/V of ``N`` new tokens into their paged slots, in place."""
    n_kv, hd = k_cache.shape[-2:]
    if bool((slot_mapping < 0).any()):  # drop the padding
        valid = slot_mapping >= 0  # (N,)
        slot_mapping, k, v = slot_mapping[valid], k[valid], v[valid]  # (n,), (n, n_kv, hd)
    k_cache.view(-1, n_kv, hd).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_cache.view(-1, n_kv, hd).index_copy_(0, slot_mapping, v.to(v_cache.dtype))


def copy_blocks(
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    src: torch.Tensor,  # (M,) int64 source block ids
    dst: torch.Tensor,  # (M,) int64 destination block ids, distinct and disjoint from src
) -> None:
    """Copy whole blocks ``src[m] -> dst[m]`` in place (copy-on-write of a shared block)."""
    if src.numel() == 0:
        return
    k_cache[dst] = k_cache[src]
    v_cache[dst] = v_cache[src]


def causal_mask(batch: int, q_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The default intra-step mask: lower triangular, ``(B, Q, Q)`` bool."""
    tri = torch.ones(q_len, q_len, dtype=torch.bool, device=device).tril()
    return tri.expand(batch, q_len, q_len)


def _gather_blocks(cache: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """(B, max_blocks) block ids -> (B, max_blocks * block_size, n_kv, hd) of their slots.
    ``index_select`` copies whole blocks (6x faster than ``cache[tables]`` on CPU here)."""
    B, width = tables.shape
    return cache.index_select(0, tables.reshape(-1)).view(
        B, width * cache.shape[1], *cache.shape[2:]
    )


def paged_tree_attention(
    q: torch.Tensor,  # (B, Q, nh, hd) padded new queries
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    block_tables: torch.Tensor,  # (B, max_blocks) int; entries past a sequence's end ignored
    context_lens: torch.Tensor,  # (B,) int cached tokens before this step
    new_lens: torch.Tensor,  # (B,) int new tokens this step (<= Q)
    tree_mask: torch.Tensor | None,  # (B, Q, Q) bool, [b, i, j]: new i sees new j; None = causal
    scale: float,
) -> torch.Tensor:  # (B, Q, nh, hd), zeros on padded rows
    """Attention of each new token over its sequence's cached context and visible new tokens."""
    B, Q, nh, _ = q.shape
    n_kv = k_cache.shape[2]
    assert nh % n_kv == 0, "n_heads must be a multiple of n_kv_heads"
    device = q.device
    ctx = context_lens.to(device=device, dtype=torch.long)[:, None, None]  # (B, 1, 1)
    new = new_lens.to(device=device, dtype=torch.long)[:, None, None]  # (B, 1, 1)

    # Gather every sequence's blocks whole: keys/values of positions 0..L-1, L = the table's
    # width in tokens (positions past a sequence's end are masked below).
    tables = block_tables.to(device=device, dtype=torch.long).clamp(min=0)  # (B, max_blocks)
    k = _gather_blocks(k_cache, tables)  # (B, L, n_kv, hd)
    v = _gather_blocks(v_cache, tables)  # (B, L, n_kv, hd)
    L = k.shape[1]

    # Visibility (B, Q, L): the whole context, then the new tokens through the tree mask.
    rel = torch.arange(L, device=device)[None, None, :] - ctx  # (B, 1, L) index among new
    row = torch.arange(Q, device=device)[None, :, None]  # (1, Q, 1)
    if tree_mask is None:  # causal: new j <= i, within the sequence's new tokens
        visible = rel <= torch.minimum(row, new - 1)  # (B, Q, L)
    else:
        new_j = rel.clamp(0, Q - 1).expand(B, Q, L)  # (B, Q, L)
        in_tree = torch.gather(tree_mask.to(device=device, dtype=torch.bool), 2, new_j)
        visible = (rel < 0) | ((rel < new) & in_tree)  # (B, Q, L)
    row_valid = (row < new)[..., 0]  # (B, Q)
    padded = not bool(row_valid.all())
    if padded:
        visible = visible & row_valid[:, :, None]

    # Grouped-query attention without copying K/V (`enable_gqa`: query head h reads kv head
    # h // group), in fp32 whatever the cache dtype. Rows with nothing visible (padding) come
    # out NaN from the softmax and are zeroed.
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2).float(),  # (B, nh, Q, hd)
        k.transpose(1, 2).float(),  # (B, n_kv, L, hd)
        v.transpose(1, 2).float(),  # (B, n_kv, L, hd)
        attn_mask=visible[:, None],  # (B, 1, Q, L)
        scale=scale,
        enable_gqa=True,
    )  # (B, nh, Q, hd)
    if padded:
        out = torch.where(row_valid[:, None, :, None], out, 0.0)
    return out.transpose(1, 2).to(q.dtype)  # (B, Q, nh, hd)
