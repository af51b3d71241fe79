"""Triton paged attention with an intra-step tree mask: a single pass and a split-KV path.

Same contract as ``kernels.paged_attention.paged_tree_attention`` (the reference), plus a
``num_splits`` keyword. Import this module lazily (see ``kernels.triton_runtime``).

Tiling: one program per (query tile, kv head, sequence). A tile's rows are (new token ``i``,
query head ``g`` of the kv group) pairs, row ``r = i * group + g``, so the query heads of a group
share every K/V load (grouped-query attention without repeating K/V). Keys stream in
``BLOCK_N`` tiles, each key found through the block table: first the cached context, visible to
every valid row, then the new tokens, visible through the tree mask (or causally). Online
softmax in fp32 with base-2 exponents.

Split-KV (flash-decoding): with few rows over a long context, the single pass runs too few
programs to fill the GPU. The context is then cut into ``num_splits`` ranges, one program each;
each writes its partial (running max, sum, unnormalised output), the last range also takes the
new tokens, and a second kernel merges the partials. ``choose_num_splits`` is the heuristic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.triton_runtime import (
    KernelCall,
    check_dtype,
    check_launchable,
    dot_in_fp32,
    launch_all,
    next_power_of_2,
    num_sms,
)

__all__ = [
    "MIN_KEYS_TO_SPLIT", "choose_num_splits", "paged_tree_attention", "plan_paged_tree_attention",
]  # fmt: skip

MIN_KEYS_PER_SPLIT = 256  # below this a split's fixed cost (q load, partial write) dominates
# Below this longest context the single pass beats any split: the split path's partial buffers
# and merge launch cost about 0.043 ms a call, which a single pass reaches near 1,300 keys
# (H200, bf16, batch 1-4, 2026-11-26: single 0.023 / 0.035-0.038 / 0.061-0.067 ms at 512 /
# 1,024 / 2,048 keys, split 0.042-0.047 ms at all three; batch 8 measured noisier).
MIN_KEYS_TO_SPLIT = 1280
MAX_SPLITS = 32
# Tile sizes and warps, chosen so that no configuration of the grid spills registers
# on sm_90 and at most a few bytes on sm_80 (`python -m kernels.triton_compile --full`; with
# 4 warps, fp16 q tiles of 64 x 128 spill on sm_90).
MAX_BLOCK_M = 64
EIGHT_WARP_TILE = 64 * 128  # q tile elements (rows x head dim) from which 8 warps are used
# Exact fp32 (FMA, not tensor cores) holds more per thread: q tiles of at most 2048 elements,
# key tiles of 32, and always 8 warps.
MAX_TILE_FP32 = 2048


@triton.jit
def _load_kv_tile(
    k_ptr,
    v_ptr,
    table_row_ptr,
    pos,  # (BLOCK_N,) positions in the sequence
    key_valid,  # (BLOCK_N,)
    head_off,
    dims,  # (BLOCK_D,)
    dim_valid,  # (BLOCK_D,)
    stride_block,
    stride_slot,
    BLOCK_SIZE: tl.constexpr,
):
    """K and V tiles (BLOCK_N, BLOCK_D) of positions ``pos``, each found via the block table."""
    safe_pos = tl.where(key_valid, pos, 0)
    page = tl.load(table_row_ptr + safe_pos // BLOCK_SIZE, mask=key_valid, other=0).to(tl.int64)
    row_off = page * stride_block + (safe_pos % BLOCK_SIZE) * stride_slot + head_off  # (BLOCK_N,)
    offs = row_off[:, None] + dims[None, :]  # (BLOCK_N, BLOCK_D)
    mask = key_valid[:, None] & dim_valid[None, :]
    k = tl.load(k_ptr + offs, mask=mask, other=0.0)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0)
    return k, v


@triton.jit
def _dot(a, b, DOT_IN_FP32: tl.constexpr):
    """a @ b accumulated in fp32; with DOT_IN_FP32 also multiplied in exact fp32 (no tf32)."""
    if DOT_IN_FP32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _online_softmax_update(q, k, v, visible, m_i, l_i, acc, qk_scale, DOT_IN_FP32: tl.constexpr):
    """Fold one key tile into each row's running (max, sum, output), base-2 exponents."""
    s = _dot(q, tl.trans(k), DOT_IN_FP32) * qk_scale  # (BLOCK_M, BLOCK_N)
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))  # (BLOCK_M,)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen no key yet
    alpha = tl.exp2(m_i - m_safe)  # (BLOCK_M,)
    p = tl.exp2(s - m_safe[:, None])  # (BLOCK_M, BLOCK_N), 0 where invisible
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_IN_FP32)
    return m_new, l_i, acc


@triton.jit
def _new_token_visibility(
    mask_ptr, b, q_len, query, row_valid, j, key_valid, IS_CAUSAL: tl.constexpr
):
    """(BLOCK_M, BLOCK_N) bool: row's new token ``query`` sees new token ``j``."""
    both = row_valid[:, None] & key_valid[None, :]
    if IS_CAUSAL:
        allowed = j[None, :] <= query[:, None]
    else:
        offs = (b * q_len + query)[:, None] * q_len + j[None, :]
        allowed = tl.load(mask_ptr + offs, mask=both, other=0) != 0
    return both & allowed


@triton.jit
def _attend_context(
    q, m_i, l_i, acc, k_ptr, v_ptr, table_row, head_off, dims, dim_valid, row_valid,
    lo, hi, qk_scale, stride_block, stride_slot,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):  # fmt: skip
    """Fold cached positions [lo, hi) into the running softmax: every valid row sees them."""
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        key_valid = pos < hi
        k, v = _load_kv_tile(
            k_ptr, v_ptr, table_row, pos, key_valid, head_off, dims, dim_valid,
            stride_block, stride_slot, BLOCK_SIZE,
        )  # fmt: skip
        visible = row_valid[:, None] & key_valid[None, :]
        m_i, l_i, acc = _online_softmax_update(
            q, k, v, visible, m_i, l_i, acc, qk_scale, DOT_IN_FP32
        )
    return m_i, l_i, acc


@triton.jit
def _attend_new_tokens(
    q, m_i, l_i, acc, k_ptr, v_ptr, table_row, head_off, dims, dim_valid, row_valid,
    ctx, new_hi, mask_ptr, b, q_len, query, qk_scale, stride_block, stride_slot,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):  # fmt: skip
    """Fold new tokens [0, new_hi) (positions ctx + j) in, each row seeing those its mask allows."""
    for start in range(0, new_hi, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)  # (BLOCK_N,) index among the new tokens
        key_valid = j < new_hi
        k, v = _load_kv_tile(
            k_ptr, v_ptr, table_row, ctx + j, key_valid, head_off, dims, dim_valid,
            stride_block, stride_slot, BLOCK_SIZE,
        )  # fmt: skip
        visible = _new_token_visibility(
            mask_ptr, b, q_len, query, row_valid, j, key_valid, IS_CAUSAL
        )
        m_i, l_i, acc = _online_softmax_update(
            q, k, v, visible, m_i, l_i, acc, qk_scale, DOT_IN_FP32
        )
    return m_i, l_i, acc


@triton.jit
def _store_rows(
    out_ptr, part_m_ptr, part_l_ptr, m_i, l_i, acc, flat_row, row_in, dims, dim_valid, split,
    num_splits, HEAD_DIM: tl.constexpr, SPLIT_KV: tl.constexpr,
):  # fmt: skip
    """The normalised output rows, or with split-KV this split's partial (max, sum, acc)."""
    tile_mask = row_in[:, None] & dim_valid[None, :]
    if not SPLIT_KV:
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # rows that saw nothing stay zero
        offs = flat_row[:, None] * HEAD_DIM + dims[None, :]
        tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=tile_mask)
    else:
        part = flat_row * num_splits + split  # (BLOCK_M,)
        tl.store(part_m_ptr + part, m_i, mask=row_in)
        tl.store(part_l_ptr + part, l_i, mask=row_in)
        tl.store(out_ptr + part[:, None] * HEAD_DIM + dims[None, :], acc, mask=tile_mask)


# Every integer that changes from step to step is a plain argument, never specialised on: each
# new value of a constexpr, or of an integer Triton specialises (== 1, divisible by 16), is a
# variant compiled on first use, 0.7-1 s on an H100 host, a stall in the middle of a run.
@triton.jit(do_not_specialize=["q_len", "stride_table", "num_splits"])
def _paged_tree_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, part_m_ptr, part_l_ptr,
    table_ptr, context_lens_ptr, new_lens_ptr, mask_ptr,
    qk_scale, q_len, n_heads, stride_table, stride_block, stride_slot, stride_head, num_splits,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SPLIT_KV: tl.constexpr, IS_CAUSAL: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):  # fmt: skip
    """One (query tile, split) x kv head x sequence: its rows' outputs, or their partials."""
    tile = tl.program_id(0) // num_splits
    split = tl.program_id(0) % num_splits
    kv = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    ctx = tl.load(context_lens_ptr + b)
    n_new = tl.load(new_lens_ptr + b)

    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    query = rows // GROUP  # new-token index of each row
    row_valid = query < n_new
    flat_row = (b * q_len + query) * n_heads + kv * GROUP + rows % GROUP  # (b, i, head) flat
    dims = tl.arange(0, BLOCK_D)
    dim_valid = dims < HEAD_DIM
    q_mask = row_valid[:, None] & dim_valid[None, :]
    q = tl.load(q_ptr + flat_row[:, None] * HEAD_DIM + dims[None, :], mask=q_mask, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    table_row = table_ptr + b * stride_table
    head_off = kv * stride_head

    # Cached context: this split's range, seen by every valid row.
    chunk = tl.cdiv(tl.cdiv(ctx, num_splits), BLOCK_N) * BLOCK_N
    lo = split * chunk
    m_i, l_i, acc = _attend_context(
        q, m_i, l_i, acc, k_ptr, v_ptr, table_row, head_off, dims, dim_valid, row_valid,
        lo, tl.minimum(lo + chunk, ctx), qk_scale, stride_block, stride_slot,
        BLOCK_SIZE, BLOCK_N, DOT_IN_FP32,
    )  # fmt: skip
    # New tokens, in the last split only; causally, none past the tile's last query.
    new_hi = tl.where(split == num_splits - 1, n_new, 0)
    if IS_CAUSAL:
        new_hi = tl.minimum(new_hi, (tile * BLOCK_M + BLOCK_M - 1) // GROUP + 1)
    m_i, l_i, acc = _attend_new_tokens(
        q, m_i, l_i, acc, k_ptr, v_ptr, table_row, head_off, dims, dim_valid, row_valid,
        ctx, new_hi, mask_ptr, b, q_len, query, qk_scale, stride_block, stride_slot,
        BLOCK_SIZE, BLOCK_N, IS_CAUSAL, DOT_IN_FP32,
    )  # fmt: skip
    _store_rows(
        out_ptr, part_m_ptr, part_l_ptr, m_i, l_i, acc, flat_row, query < q_len,
        dims, dim_valid, split, num_splits, HEAD_DIM, SPLIT_KV,
    )  # fmt: skip


@triton.jit(do_not_specialize=["num_splits"])
def _merge_splits_kernel(
    part_m_ptr, part_l_ptr, part_acc_ptr, out_ptr, num_splits,
    BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One output row (b, i, head) from its splits' partials; empty splits weigh zero."""
    row = tl.program_id(0).to(tl.int64)
    splits = tl.arange(0, BLOCK_S)  # (BLOCK_S,) >= num_splits
    split_valid = splits < num_splits
    part = row * num_splits + splits  # (BLOCK_S,)
    m = tl.load(part_m_ptr + part, mask=split_valid, other=float("-inf"))
    l_s = tl.load(part_l_ptr + part, mask=split_valid, other=0.0)
    m_max = tl.max(m, 0)
    weight = tl.exp2(m - tl.where(m_max == float("-inf"), 0.0, m_max))  # (BLOCK_S,)
    total = tl.sum(weight * l_s, 0)
    dims = tl.arange(0, BLOCK_D)
    dim_valid = dims < HEAD_DIM
    acc_mask = split_valid[:, None] & dim_valid[None, :]
    acc = tl.load(part_acc_ptr + part[:, None] * HEAD_DIM + dims[None, :], mask=acc_mask, other=0.0)
    out = tl.sum(weight[:, None] * acc, 0) / tl.where(total > 0, total, 1.0)  # (BLOCK_D,)
    tl.store(out_ptr + row * HEAD_DIM + dims, out.to(out_ptr.dtype.element_ty), mask=dim_valid)


def choose_num_splits(programs: int, max_keys: int, sms: int) -> int:
    """How many context ranges to split each (query tile, kv head, sequence) into.

    Split only when the single-pass grid (``programs``) leaves streaming multiprocessors idle
    and the longest context (``max_keys``) is at least ``MIN_KEYS_TO_SPLIT``: then aim at about
    two programs per SM, but keep at least ``MIN_KEYS_PER_SPLIT`` keys per split and at most
    ``MAX_SPLITS`` splits.
    """
    if programs >= sms or max_keys < MIN_KEYS_TO_SPLIT:
        return 1
    wanted = -(-2 * sms // programs)
    return max(1, min(wanted, max_keys // MIN_KEYS_PER_SPLIT, MAX_SPLITS))


@dataclass(frozen=True)
class _Launch:
    """Tile sizes, warps and grid of one call."""

    group: int
    block_m: int
    block_n: int
    block_d: int
    num_warps: int
    tiles: int
    num_splits: int


def _plan_launch(
    q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor, num_splits: int | None
) -> _Launch:
    B, Q, nh, hd = q.shape
    _, block_size, n_kv, _ = k_cache.shape
    group = nh // n_kv
    block_d = max(16, next_power_of_2(hd))
    max_m = max(16, MAX_TILE_FP32 // block_d) if dot_in_fp32(q.dtype) else MAX_BLOCK_M
    block_m = min(max(16, next_power_of_2(Q * group)), max_m)  # dot needs >= 16 rows
    tiles = math.ceil(Q * group / block_m)
    if dot_in_fp32(q.dtype):
        block_n, num_warps = 32, 8
    else:
        block_n = 64 if block_d <= 128 else 32
        num_warps = 8 if block_m * block_d >= EIGHT_WARP_TILE else 4
    if num_splits is None:
        max_keys = block_tables.shape[1] * block_size  # bound on the longest sequence, no sync
        num_splits = choose_num_splits(B * n_kv * tiles, max_keys, num_sms(q.device))
    if not 1 <= num_splits <= 1024:
        raise ValueError(f"num_splits must be in [1, 1024], got {num_splits}")
    return _Launch(group, block_m, block_n, block_d, num_warps, tiles, num_splits)


def _check_inputs(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, tree_mask: torch.Tensor | None
) -> None:
    check_dtype("q", q)
    B, Q, nh, hd = q.shape
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise TypeError(f"q, k_cache and v_cache must share a dtype, got {q.dtype}, "
                        f"{k_cache.dtype}, {v_cache.dtype}")  # fmt: skip
    if k_cache.shape != v_cache.shape or k_cache.stride() != v_cache.stride():
        raise ValueError("k_cache and v_cache must have the same shape and strides")
    if k_cache.shape[-1] != hd or k_cache.stride(-1) != 1 or nh % k_cache.shape[2]:
        raise ValueError(
            f"cache (num_blocks, block_size, n_kv, {hd}) with a contiguous last dim and n_kv "
            f"dividing {nh} heads expected, got shape {tuple(k_cache.shape)}"
        )
    if tree_mask is not None and tree_mask.shape != (B, Q, Q):
        raise ValueError(f"tree_mask must be ({B}, {Q}, {Q}), got {tuple(tree_mask.shape)}")


def _output(q: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must be like q {tuple(q.shape)} {q.dtype} on {q.device}")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    return out


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """``t`` at a 16-byte aligned address (copied if not): Triton specialises on each pointer's
    alignment, so a view at an odd offset would compile, and stall on, a variant of its own."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


def paged_tree_attention(
    q: torch.Tensor,  # (B, Q, nh, hd) padded new queries
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    block_tables: torch.Tensor,  # (B, max_blocks) int; entries past a sequence's end ignored
    context_lens: torch.Tensor,  # (B,) int cached tokens before this step
    new_lens: torch.Tensor,  # (B,) int new tokens this step (<= Q)
    tree_mask: torch.Tensor | None,  # (B, Q, Q) bool, [b, i, j]: new i sees new j; None = causal
    scale: float,
    *,
    num_splits: int | None = None,  # None: choose_num_splits; 1: single pass; > 1: split-KV
    out: torch.Tensor | None = None,  # (B, Q, nh, hd) contiguous, q's dtype: written in place
) -> torch.Tensor:  # (B, Q, nh, hd), zeros on padded rows
    """Attention of each new token over its sequence's cached context and visible new tokens."""
    check_launchable(q, k_cache, v_cache)
    calls, out = plan_paged_tree_attention(
        q, k_cache, v_cache, block_tables, context_lens, new_lens, tree_mask, scale,
        num_splits=num_splits, out=out,
    )  # fmt: skip
    launch_all(calls)
    return out


def plan_paged_tree_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    new_lens: torch.Tensor,
    tree_mask: torch.Tensor | None,
    scale: float,
    *,
    num_splits: int | None = None,
    out: torch.Tensor | None = None,
) -> tuple[list[KernelCall], torch.Tensor]:
    """The launches of ``paged_tree_attention`` and the output they fill, arguments checked."""
    _check_inputs(q, k_cache, v_cache, tree_mask)
    out = _output(q, out)
    B, Q, nh, hd = q.shape
    if out.numel() == 0:
        return [], out
    launch = _plan_launch(q, k_cache, block_tables, num_splits)
    device = q.device
    tables = _aligned(block_tables.to(device=device).contiguous())  # (B, max_blocks)
    mask = q if tree_mask is None else tree_mask.to(device=device, dtype=torch.bool)
    mask = mask.contiguous().view(torch.uint8) if tree_mask is not None else mask
    splits = launch.num_splits
    part_m = part_l = out
    target = out
    if splits > 1:
        part_m = torch.empty((B, Q, nh, splits), dtype=torch.float32, device=device)
        part_l = torch.empty_like(part_m)
        target = torch.empty((B, Q, nh, splits, hd), dtype=torch.float32, device=device)
    args = (
        q.contiguous(), k_cache, v_cache, target, part_m, part_l,
        tables, _aligned(context_lens.to(device=device, dtype=torch.int64)),
        _aligned(new_lens.to(device=device, dtype=torch.int64)), mask,
        scale * math.log2(math.e), Q, nh, tables.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), splits,
    )  # fmt: skip
    kwargs = dict(
        GROUP=launch.group, HEAD_DIM=hd, BLOCK_D=launch.block_d, BLOCK_SIZE=k_cache.shape[1],
        BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, SPLIT_KV=splits > 1,
        IS_CAUSAL=tree_mask is None, DOT_IN_FP32=dot_in_fp32(q.dtype),
        num_warps=launch.num_warps,
    )  # fmt: skip
    grid = (launch.tiles * splits, k_cache.shape[2], B)
    calls = [KernelCall(_paged_tree_attention_kernel, grid, args, kwargs)]
    if splits > 1:
        block_s = max(MAX_SPLITS, next_power_of_2(splits))  # one variant for every chosen count
        merge_constexprs = dict(BLOCK_S=block_s, HEAD_DIM=hd, BLOCK_D=launch.block_d)
        merge_args = (part_m, part_l, target, out, splits)
        calls.append(KernelCall(_merge_splits_kernel, (B * Q * nh,), merge_args, merge_constexprs))
    return calls, out
