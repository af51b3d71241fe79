"""Decode attention as the kernel divides its work: thread blocks (CTAs) over sequences,
heads and KV splits, run in rounds on the GPU's streaming multiprocessors (SMs).

A decode kernel gives each CTA one sequence's keys for one head (all of that KV head's
query rows packed together, or one query head), walked in blocks of `key_block` keys. Its
time is set by the busiest SM: with k = ⌈CTAs / SMs⌉ CTAs on it and two resident at a
time, ⌊k/2⌋ rounds of two sharing the SM and, for odd k, one round alone, each round a
fixed cost plus the CTA's bytes at a per-CTA streaming rate; smooth-maxed with the whole
KV at a share of bandwidth. Measured: a lone CTA streams about 20-30 GB/s, far below
HBM / SMs, so a batch-1 decode with one CTA per head is latency-bound unless the kernel
splits the context.

Two kernels, as the public profiles ran them (`DECODE_KERNELS`):
- `flash_decoding`: FlashAttention-2's `flash_attn_with_kvcache` (Vidur's A100 profile,
  vLLM's FlashAttention backend): one CTA per (sequence, KV head), split along the context
  by `split_count` (FlashAttention's split-KV heuristic) into parts of whole 128-key
  blocks, the split count sized by the block table's width (the longest sequence, or the
  profiler's whole cache), plus a combine kernel when split.
- `flash_varlen`: `flash_attn_varlen_func` with one query per sequence as FlashAttention
  ran it before v2.4.3 (LLMServingSim's H100 profile): one CTA per (sequence, query head),
  64-key blocks, never split.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

RESIDENT_CTAS = 2  # both kernels' tiles fit two CTAs per SM in shared memory (A100, H100)
MAX_SPLITS = 128  # FlashAttention's cap


@dataclass(frozen=True)
class DecodeKernel:
    """How a decode kernel divides one step's work into CTAs."""

    name: str
    per_query_head: bool  # one CTA per query head (else per KV head, GQA rows packed)
    key_block: int  # keys a CTA loads per iteration
    splits_context: bool  # FlashAttention's split-KV heuristic


DECODE_KERNELS = {
    k.name: k
    for k in (
        DecodeKernel("flash_decoding", per_query_head=False, key_block=128, splits_context=True),
        DecodeKernel("flash_varlen", per_query_head=True, key_block=64, splits_context=False),
    )
}


@lru_cache(maxsize=65536)
def split_count(parallel_ctas: int, multiprocessors: int, key_blocks: int) -> int:
    """FlashAttention-2's split-KV heuristic (`num_splits_heuristic` before v2.7.1.post2,
    which from December 2024 counts twice the SMs): no split when the unsplit CTAs nearly
    fill the SMs; else the fewest splits whose wave efficiency is within 85 % of the best,
    counting only split counts that change the blocks per split. In float32 as the C++
    computes it, so that ties at exactly 85 % fall the same way."""
    if np.float32(parallel_ctas) >= np.float32(0.8) * np.float32(multiprocessors):
        return 1
    most = min(MAX_SPLITS, multiprocessors, key_blocks)
    eligible = [s for s in range(1, most + 1) if _changes_blocks(key_blocks, s)]
    if not eligible:  # no key blocks
        return 1
    efficiency = {s: _wave_efficiency(parallel_ctas * s, multiprocessors) for s in eligible}
    best = max(efficiency.values())
    return next(s for s in eligible if float(efficiency[s]) >= 0.85 * float(best))


def _wave_efficiency(ctas: int, multiprocessors: int) -> np.float32:
    waves = np.float32(ctas) / np.float32(multiprocessors)
    return waves / np.ceil(waves)


def _changes_blocks(key_blocks: int, splits: int) -> bool:
    return splits == 1 or -(-key_blocks // splits) != -(-key_blocks // (splits - 1))


@dataclass(frozen=True)
class DecodeWork:
    """One step's decode work as the kernel lays it out."""

    busiest_ctas: int  # CTAs on the busiest SM
    cta_keys: int  # keys of one CTA (its blocks, padded)
    splits: int  # context splits (1: no combine kernel)


def decode_work(
    kernel: DecodeKernel,
    batch: int,
    heads: int,
    multiprocessors: int,
    blocks: int,
    table_blocks: int,
) -> DecodeWork:
    """`batch` sequences of `blocks` key blocks each (the step's mean; none counts as one)
    on `heads` CTA heads; `table_blocks` (the block table's width) sizes the split."""
    blocks = max(blocks, 1)  # a decode reads at least its own key
    table_blocks = max(table_blocks, blocks)
    splits, active, per_split = 1, 1, blocks
    if kernel.splits_context:
        splits = split_count(batch * heads, multiprocessors, table_blocks)
        per_split = -(-table_blocks // splits)
        active = -(-blocks // per_split)  # splits past the context exit at once
    ctas = batch * heads * active
    return DecodeWork(
        busiest_ctas=-(-ctas // multiprocessors),
        cta_keys=min(per_split, blocks) * kernel.key_block,
        splits=splits,
    )  # fmt: skip


def busiest_sm_s(
    busiest_ctas: int, cta_bytes: float, alone: tuple[float, float], shared: tuple[float, float]
) -> float:
    """Time of the busiest SM: rounds of `RESIDENT_CTAS` sharing it, then one alone.
    `alone` / `shared`: (fixed seconds, bytes per second) of one CTA in each case."""
    pairs, single = divmod(busiest_ctas, RESIDENT_CTAS)
    return pairs * (shared[0] + cta_bytes / shared[1]) + single * (alone[0] + cta_bytes / alone[1])
