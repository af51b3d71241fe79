"""Triton paged-cache writes: new tokens' K/V into their slots, and whole-block copies.

Same contracts as ``write_kv`` and ``copy_blocks`` in ``kernels.paged_attention`` (the
references). Import this module lazily (see ``kernels.triton_runtime``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.triton_runtime import KernelCall, check_launchable, launch_all, next_power_of_2

__all__ = ["copy_blocks", "plan_copy_blocks", "plan_write_kv", "write_kv"]

COPY_BLOCK_ELEMENTS = 1024  # elements of one block that one copy program moves


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    stride_tok, stride_head, stride_block, stride_slot, stride_cache_head,
    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, N_KV: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """One token: all its kv heads into its slot; padding tokens (slot < 0) write nothing."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token)
    keep = slot >= 0
    slot = tl.where(keep, slot, 0)
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    inside = (heads[:, None] < N_KV) & (dims[None, :] < HEAD_DIM)  # (BLOCK_H, BLOCK_D)
    mask = tl.where(keep, inside, False)  # not `keep & inside`: the interpreter mistypes that
    src = token * stride_tok + heads[:, None] * stride_head + dims[None, :]
    block_off = (slot // BLOCK_SIZE) * stride_block + (slot % BLOCK_SIZE) * stride_slot
    dst = block_off + heads[:, None] * stride_cache_head + dims[None, :]
    k = tl.load(k_ptr + src, mask=mask)
    v = tl.load(v_ptr + src, mask=mask)
    tl.store(k_cache_ptr + dst, k, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


def write_kv(
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    k: torch.Tensor,  # (N, n_kv, hd)
    v: torch.Tensor,  # (N, n_kv, hd)
    slot_mapping: torch.Tensor,  # (N,) int64 flat slot per token; < 0 = padding, skipped
) -> None:
    """Scatter the K/V of ``N`` new tokens into their paged slots, in place."""
    check_launchable(k_cache, v_cache, k, v, slot_mapping)
    launch_all(plan_write_kv(k_cache, v_cache, k, v, slot_mapping))


def plan_write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> list[KernelCall]:
    """The launches of ``write_kv`` (none for no tokens), arguments checked."""
    _, block_size, n_kv, hd = k_cache.shape
    if k.shape != v.shape or k.shape[1:] != (n_kv, hd) or slot_mapping.shape != k.shape[:1]:
        raise ValueError(
            f"k, v must be (N, {n_kv}, {hd}) and slot_mapping (N,), got {tuple(k.shape)}, "
            f"{tuple(v.shape)}, {tuple(slot_mapping.shape)}"
        )
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        raise ValueError("k_cache and v_cache must share strides, with a contiguous last dim")
    if k.shape[0] == 0:
        return []
    # Convert here, not in the kernel: torch rounds exactly as the reference (to nearest even).
    k = k.to(k_cache.dtype).contiguous()  # (N, n_kv, hd)
    v = v.to(v_cache.dtype).contiguous()
    args = (
        k, v, k_cache, v_cache, slot_mapping.contiguous(),
        k.stride(0), k.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
    )  # fmt: skip
    kwargs = dict(
        BLOCK_SIZE=block_size, HEAD_DIM=hd, N_KV=n_kv,
        BLOCK_H=next_power_of_2(n_kv), BLOCK_D=next_power_of_2(hd),
    )  # fmt: skip
    return [KernelCall(_write_kv_kernel, (k.shape[0],), args, kwargs)]


@triton.jit
def _copy_blocks_kernel(
    k_cache_ptr, v_cache_ptr, src_ptr, dst_ptr,
    stride_block, stride_slot, stride_head,
    BLOCK_SIZE: tl.constexpr, N_KV: tl.constexpr, HEAD_DIM: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """One chunk of one block pair: block ``src[m]`` -> block ``dst[m]``, K and V."""
    pair = tl.program_id(0)
    src = tl.load(src_ptr + pair)
    dst = tl.load(dst_ptr + pair)
    element = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)  # flat (slot, head, dim) index
    inside = element < BLOCK_SIZE * N_KV * HEAD_DIM
    slot = element // (N_KV * HEAD_DIM)
    head = (element // HEAD_DIM) % N_KV
    offs = slot * stride_slot + head * stride_head + element % HEAD_DIM  # (CHUNK,)
    src_offs = src * stride_block + offs
    dst_offs = dst * stride_block + offs
    tl.store(k_cache_ptr + dst_offs, tl.load(k_cache_ptr + src_offs, mask=inside), mask=inside)
    tl.store(v_cache_ptr + dst_offs, tl.load(v_cache_ptr + src_offs, mask=inside), mask=inside)


def copy_blocks(
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    src: torch.Tensor,  # (M,) int64 source block ids
    dst: torch.Tensor,  # (M,) int64 destination block ids, distinct and disjoint from src
) -> None:
    """Copy whole blocks ``src[m] -> dst[m]`` in place (copy-on-write of a shared block)."""
    check_launchable(k_cache, v_cache, src, dst)
    launch_all(plan_copy_blocks(k_cache, v_cache, src, dst))


def plan_copy_blocks(
    k_cache: torch.Tensor, v_cache: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
) -> list[KernelCall]:
    """The launches of ``copy_blocks`` (none for no blocks), arguments checked."""
    if src.shape != dst.shape or src.dim() != 1:
        raise ValueError(f"src and dst must be (M,), got {tuple(src.shape)}, {tuple(dst.shape)}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1:
        raise ValueError("k_cache and v_cache must share strides, with a contiguous last dim")
    if src.numel() == 0:
        return []
    _, block_size, n_kv, hd = k_cache.shape
    chunks = triton.cdiv(block_size * n_kv * hd, COPY_BLOCK_ELEMENTS)
    args = (
        k_cache, v_cache, src.to(torch.int64).contiguous(), dst.to(torch.int64).contiguous(),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
    )  # fmt: skip
    kwargs = dict(BLOCK_SIZE=block_size, N_KV=n_kv, HEAD_DIM=hd, CHUNK=COPY_BLOCK_ELEMENTS)
    return [KernelCall(_copy_blocks_kernel, (src.numel(), chunks), args, kwargs)]
