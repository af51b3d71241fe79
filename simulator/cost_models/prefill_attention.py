"""Prefill attention as the kernel divides its work: CTAs over (query block, split, head,
sequence), each walking its key blocks, then run on the SMs a few at a time.

A chunk of `c` query tokens over `p` cached keys is cut into ⌈c / query_block⌉ query
blocks per head; under the causal mask query block m reads the keys before
p + min((m + 1)·query_block, c), in whole `key_block`s. A kernel that writes the chunk's
own K/V into the paged cache itself (FlashAttention-2's `flash_attn_with_kvcache` with new
keys: every CTA copies the new keys of its key range before it reads them) pays for the
copied keys on top. Measured (Vidur's A100 profile, Llama-2-70B at TP 2): a key block read
from the cache costs a shared CTA 4.6 µs, one of the chunk's own keys' blocks about 3× that,
which is why a chunk's causal triangle costs about what the full square over cached keys
would.

The SMs run `resident_ctas` CTAs each. With no more CTAs than SMs, every CTA runs alone and
the step takes its longest CTA. Past that they share SMs (slower each): up to one wave the
busiest SM holds two and the step takes the longer of the longest CTA and the CTAs' summed
time spread over the slots; past one wave, the spread plus a fitted share of the longest
(the last CTAs start when slots free up: between the spread alone and Graham's bound of
spread + longest; fitted 0.52 on the A100 profile).

Two kernels, as the public profiles ran them (`PREFILL_KERNELS`, named like the decode
kernels of `decode_attention.py`, one fit describing both):
- `flash_decoding`: `flash_attn_with_kvcache`'s split-KV kernel given the new keys (Vidur's
  profiles: Sarathi-Serve's FlashAttention backend; engines that write the cache in a kernel
  of their own, as vLLM does, pay no copies): 64 × 128 tiles, two CTAs per SM, the new keys copied,
  the context split by FlashAttention's heuristic when the CTAs leave the SMs idle, the
  split sized by the block table (the longest sequence of the step) plus a combine kernel.
- `flash_varlen`: `flash_attn_varlen_func`'s forward kernel on sm80/sm90 (LLMServingSim's
  H100 profile): 128 × 64 tiles, three CTAs per SM, the keys already in place, no split.

Limits: the tiles are those of head dimension 128 (every profiled model's; FlashAttention's
split kernel reads 256 keys a block at head dimension ≤ 64 and 64 above 128), and the CTAs
per SM those of the A100's and H100's shared memory (an A40's or RTX 3090's 100 KB holds one
80 KB tile, not two); those GPUs take the A100's parameters as measured there.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from simulator.cost_models.decode_attention import split_count


class PrefillKernel(NamedTuple):
    """How a prefill kernel divides one step's work into CTAs (a named tuple: it keys
    `fresh_sums`' memo, and a tuple hashes in C)."""

    name: str
    query_block: int  # query rows per CTA
    key_block: int  # keys a CTA reads per iteration
    copies_new_keys: bool  # writes the chunk's K/V into the cache inside the kernel
    splits_context: bool  # FlashAttention's split-KV heuristic
    resident_ctas: int  # CTAs an SM holds at once (shared memory per tile)


PREFILL_KERNELS = {
    k.name: k
    for k in (
        PrefillKernel("flash_decoding", 64, 128, copies_new_keys=True, splits_context=True,
                      resident_ctas=2),  # 80 KB of shared memory a CTA
        PrefillKernel("flash_varlen", 128, 64, copies_new_keys=False, splits_context=False,
                      resident_ctas=3),  # 64 KB
    )
}  # fmt: skip


class ChunkWork(NamedTuple):
    """One sequence's CTAs for one head: how many, their key blocks and copied keys (in key
    blocks) summed, and (blocks, copied) of the CTAs that may run longest (each split's
    last query block: any cost a + b·blocks + c·copied peaks at one of them)."""

    ctas: int
    blocks: int
    copied: float
    longest: tuple[tuple[int, float], ...]


def chunk_work(
    kernel: PrefillKernel, chunk: int, cached: int, split_blocks: int, causal: bool
) -> ChunkWork:
    """The CTAs of a `chunk` over `cached` keys, the context cut every `split_blocks` key
    blocks (the split kernel's parts; 0: no split). Unsplit (most steps) in closed form;
    split (only when the CTAs are few) walked."""
    if chunk <= 0:
        return ChunkWork(0, 0, 0.0, ())
    if split_blocks:
        return walked_chunk_work(kernel, chunk, cached, split_blocks, causal)
    ctas, blocks, copied, end, copy = unsplit_sums(kernel, chunk, cached, causal)
    return ChunkWork(ctas, blocks, copied, ((end, copy),))


def unsplit_sums(
    kernel: PrefillKernel, chunk: int, cached: int, causal: bool
) -> tuple[int, int, float, int, float]:
    """`chunk_work` of a chunk of ≥ 1 token, unsplit, as a plain tuple: (CTAs, key blocks,
    copied key blocks, and the longest CTA's key blocks and copied blocks). In closed form:
    it runs for every chunk of every step that prefills, and a memo of the (chunk, cached)
    pairs a long run meets costs more than the sums (measured); `fresh_sums` memoises the
    chunks over no cache."""
    qb, kb = kernel.query_block, kernel.key_block
    query_blocks = -(-chunk // qb)
    end = -(-(cached + chunk) // kb)  # key blocks the last query block reads
    copy = chunk / kb if kernel.copies_new_keys else 0.0
    if not causal:  # every query block reads every key
        return query_blocks, query_blocks * end, query_blocks * copy, end, copy
    # Query block m < M - 1 reads ⌈(p + qb·(m + 1)) / kb⌉ blocks; from m* on that is the
    # last block, and it copies the whole chunk; before, its blocks' new keys.
    blocks = ceil_sum(query_blocks - 1, qb, cached, kb) + end
    if not kernel.copies_new_keys:
        return query_blocks, blocks, 0.0, end, 0.0
    first_full = min(max((kb * (end - 1) - cached) // qb, 0), query_blocks - 1)
    partial = kb * ceil_sum(first_full, qb, cached, kb) - cached * first_full
    copied = (partial + chunk * (query_blocks - first_full)) / kb
    return query_blocks, blocks, copied, end, copy


@lru_cache(maxsize=1 << 15)
def fresh_sums(
    kernel: PrefillKernel, chunk: int, causal: bool
) -> tuple[int, int, float, int, float]:
    """`unsplit_sums` of a chunk over no cache (a prompt's first), memoised: its sizes are
    bounded by the step's token budget and recur all run long, where the (chunk, cached)
    pairs of later chunks do not (a memo of those made a 100k run slower)."""
    return unsplit_sums(kernel, chunk, 0, causal)


def ceil_sum(n: int, step: int, offset: int, divisor: int) -> int:
    """Σ_{j=1..n} ⌈(offset + step·j) / divisor⌉ (n, step, divisor ≥ 1 or n = 0; offset ≥ 0).
    Where one of step and divisor divides the other (every kernel's tiles) in O(1): with
    step = r·divisor each term is r·j + ⌈offset / divisor⌉; with divisor = r·step it is
    ⌊(a + j) / r⌋ for a = ⌊(offset + divisor − 1) / step⌋, summed by `_floor_prefix`.
    Otherwise as a floor sum."""
    if n <= 0:
        return 0
    if step % divisor == 0:
        return step // divisor * n * (n + 1) // 2 + n * -(-offset // divisor)
    if divisor % step == 0:
        r, a = divisor // step, (offset + divisor - 1) // step
        return _floor_prefix(a + n, r) - _floor_prefix(a, r)
    return floor_sum(n, divisor, step, offset + step + divisor - 1)


def _floor_prefix(n: int, r: int) -> int:
    """Σ_{i=1..n} ⌊i / r⌋: r·(0 + 1 + … + (q − 1)) for the whole groups of r, then q for
    each of the n − q·r + 1 terms from q·r on (q = ⌊n / r⌋)."""
    q = n // r
    return r * q * (q - 1) // 2 + q * (n - q * r + 1)


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """Σ_{i=0..n-1} ⌊(a·i + b) / m⌋ for a, b ≥ 0, in O(log) steps: take out the whole
    multiples of m from a and b, then count the lattice points under the line the other
    way round (the roles of a and m swap, as in Euclid's algorithm)."""
    total = 0
    while n > 0:
        total += (n - 1) * n // 2 * (a // m) + n * (b // m)
        a, b = a % m, b % m
        top = a * n + b
        if top < m:
            break
        n, b, m, a = top // m, top % m, a, m
    return total


def walked_chunk_work(
    kernel: PrefillKernel, chunk: int, cached: int, split_blocks: int, causal: bool
) -> ChunkWork:
    """`chunk_work` by walking every query block and split (the definition)."""
    qb, kb = kernel.query_block, kernel.key_block
    query_blocks = -(-chunk // qb)
    new_end = cached + chunk
    ctas = blocks = 0
    copied = 0.0
    last: set[tuple[int, float]] = set()
    for m in range(query_blocks):
        keys = cached + min(qb * (m + 1), chunk) if causal else new_end
        end = -(-keys // kb)  # key blocks this query block reads
        per = split_blocks or end
        for lo in range(0, end, per):
            hi = min(lo + per, end)
            moved = 0.0
            if kernel.copies_new_keys:
                moved = max(min(new_end, hi * kb) - max(cached, lo * kb), 0) / kb
            ctas += 1
            blocks += hi - lo
            copied += moved
            if m == query_blocks - 1:
                last.add((hi - lo, moved))
    return ChunkWork(ctas, blocks, copied, tuple(sorted(last)))


class PrefillWork(NamedTuple):
    """One step's prefill attention, every head: CTAs, key blocks and copied key blocks
    summed, (blocks, copied) candidates for the longest CTA, splits, keys streamed."""

    ctas: int
    blocks: int
    copied: float
    longest: tuple[tuple[int, float], ...]
    splits: int
    keys: int  # Σ over sequences of the keys each reads (cached + chunk)


def prefill_work(
    kernel: PrefillKernel,
    chunks: Sequence[tuple[int, int, int]],
    heads: int,
    multiprocessors: int,
    causal: bool = True,
) -> PrefillWork:
    """`chunks`: (new tokens, cached tokens, sequences like it) per kind of sequence in the
    step; `heads`: query heads on this GPU. One pass over the chunks, unsplit (this runs for
    every step that prefills); a second one, split, in the rare step that splits."""
    work, sequences, widest, reach = _summed(kernel, chunks, heads, 0, causal)
    if kernel.splits_context:
        query_blocks = -(-widest // kernel.query_block)
        table_blocks = -(-reach // kernel.key_block)
        splits = split_count(sequences * heads * query_blocks, multiprocessors, table_blocks)
        if splits > 1:
            split_blocks = -(-table_blocks // splits)
            work = _summed(kernel, chunks, heads, split_blocks, causal)[0]
            return work._replace(splits=splits)
    return work


def _summed(
    kernel: PrefillKernel,
    chunks: Sequence[tuple[int, int, int]],
    heads: int,
    split_blocks: int,
    causal: bool,
) -> tuple[PrefillWork, int, int, int]:
    """The chunks' CTAs summed; their sequences, widest chunk and furthest key."""
    ctas = blocks = keys = sequences = widest = reach = 0
    copied = 0.0
    longest: list[tuple[int, float]] = []
    for chunk, cached, count in chunks:
        if split_blocks or chunk <= 0:  # what `chunk_work` does not take to `unsplit_sums`
            chunk_ctas, chunk_blocks, chunk_copied, candidates = chunk_work(
                kernel, chunk, cached, split_blocks, causal
            )
            longest += candidates
        else:  # most steps: the closed form (memoised over no cache), no named tuples
            if cached == 0:
                sums = fresh_sums(kernel, chunk, causal)
            else:
                sums = unsplit_sums(kernel, chunk, cached, causal)
            chunk_ctas, chunk_blocks, chunk_copied, end, copy = sums
            longest.append((end, copy))
        n = count * heads
        ctas += chunk_ctas * n
        blocks += chunk_blocks * n
        copied += chunk_copied * n
        keys += (chunk + cached) * count
        sequences += count
        if chunk > widest:
            widest = chunk
        if chunk + cached > reach:
            reach = chunk + cached
    work = PrefillWork(ctas, blocks, copied, tuple(longest), 1, keys)
    return work, sequences, widest, reach
