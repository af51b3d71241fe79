"""Kernel times from a GPU's fitted parameters (`KernelFit`): GEMMs, elementwise kernels
and attention, each a smooth function of its shape, vectorised over numpy arrays.

GEMM (m tokens × k inputs × n outputs, on one GPU):
    launch + smooth_max(2·m'·k·n / (peak_flops · η_c), bytes(k·n + m·k + m·n) / (bandwidth · η_m))
with smooth_max(a, b) = (aᵖ + bᵖ)^(1/p) and m' the rows padded to the GEMM kernels' tile
height: 64 up to 64 rows, then multiples of 128. The roofline's max(a, b) (p = ∞) assumes
the weight stream and the tensor cores overlap perfectly; measured GEMMs near the ridge do
not (`p` fitted: about 1.8-2.7), and large GEMMs reach a higher share of peak than the
roofline's default 0.6. The padding is what Vidur's profiles show on all three GPUs: a
GEMM's time is flat from 1 to 64 rows and steps up after every multiple of 128 (Llama-2-7B
on an A100: 136 rows cost 1.9× one row, 128 rows 1.3×); with it, the fit's worst error on
the A100 drops from 35 % to 20 %.
Elementwise kernels: launch + bytes / (bandwidth · η_e), both per kind of kernel (norm,
RoPE, activation, residual add, embedding gather).
Decode attention (one query per sequence): launch + smooth_max(the busiest SM's rounds of
CTAs, all KV bytes / (bandwidth · η_d)) + a combine kernel when the context is split
(`decode_attention.py`: how the fit's kernel divides the work). Prefill and multi-query
attention: launch + smooth_max(the CTAs' time on the SMs, all KV bytes at the decode's
streaming rate) + a combine kernel when split (`prefill_attention.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from simulator.catalogs.hardware import GPUSpec
from simulator.catalogs.kernel_fit import ELEMENTWISE_KINDS, KernelFit
from simulator.cost_models.decode_attention import DECODE_KERNELS, busiest_sm_s, decode_work
from simulator.cost_models.layer_ops import LayerShape
from simulator.cost_models.prefill_attention import PREFILL_KERNELS, PrefillWork, prefill_work
from workbench.errors import WorkbenchError

Times = TypeVar("Times", float, np.ndarray)


def smooth_max(a: Times, b: Times, p: float) -> Times:
    """(aᵖ + bᵖ)^(1/p): operators only, so Python floats (a step's scalars) stay fast and
    arrays (the fit's points) work alike. Times in seconds and p ≤ ~3 cannot overflow."""
    return (a**p + b**p) ** (1.0 / p)


SMALL_ROW_TILE = 64  # GEMMs of up to 64 rows run 64-row tiles
ROW_TILE = 128  # larger ones 128-row tiles


def padded_rows(m: np.ndarray) -> np.ndarray:
    """Rows a GEMM computes for `m` tokens: whole tiles."""
    return np.where(m <= SMALL_ROW_TILE, SMALL_ROW_TILE, np.ceil(m / ROW_TILE) * ROW_TILE)


class KernelTimes:
    """Times of one GPU's kernels for a given element size."""

    def __init__(self, gpu: GPUSpec, fit: KernelFit, dtype: str, elem_bytes: int) -> None:
        self.fit = fit
        self.elem_bytes = elem_bytes
        self.peak_flops = gpu.peak_flops(dtype)
        self.bandwidth = gpu.memory_bandwidth_bytes_s
        self.decode_kernel = DECODE_KERNELS[fit.decode_attention_kernel]  # checked on load
        self.multiprocessors = _multiprocessors(gpu)
        per_sm = self.bandwidth / self.multiprocessors
        self.lone_cta = (fit.decode_cta_s, per_sm * fit.decode_cta_bandwidth_share)
        self.shared_cta = (fit.decode_shared_cta_s, per_sm * fit.decode_shared_cta_bandwidth_share)
        self.decode_stream_bytes_s = self.bandwidth * fit.decode_memory_efficiency
        self._elementwise = {  # kind: (launch, bytes per second)
            kind: (
                getattr(fit, f"{kind}_launch_s"),
                self.bandwidth * getattr(fit, f"{kind}_memory_efficiency"),
            )
            for kind in ELEMENTWISE_KINDS
        }

    def gemm_s(self, m: np.ndarray, k: float, n: float) -> np.ndarray:
        """`m` (array) rows through a k × n weight matrix."""
        f = self.fit
        compute = 2.0 * padded_rows(m) * k * n / (self.peak_flops * f.gemm_compute_efficiency)
        moved = self.elem_bytes * (k * n + m * (k + n))
        memory = moved / (self.bandwidth * f.gemm_memory_efficiency)
        return f.gemm_launch_s + smooth_max(compute, memory, f.gemm_overlap)

    def elementwise_s(self, kind: str, moved_bytes: Times) -> Times:
        """A `kind` (`ELEMENTWISE_KINDS`) of elementwise kernel moving `moved_bytes`."""
        launch_s, rate = self._elementwise[kind]
        return launch_s + moved_bytes / rate

    def decode(self, shape: LayerShape) -> DecodeAttention:
        """The decode attention of one layer of `shape` (hold on to it: it memoises)."""
        return DecodeAttention(self, shape)

    def prefill(self, shape: LayerShape) -> PrefillAttention:
        """The prefill attention of one layer of `shape`."""
        return PrefillAttention(self, shape)

    def attention_overlap_s(self, cta_s: Times, streamed_s: Times) -> Times:
        """An attention kernel's CTAs against its whole KV stream (a plain sum at the
        fitted exponent 1)."""
        overlap = self.fit.decode_overlap
        if overlap == 1.0:
            return cta_s + streamed_s
        return smooth_max(cta_s, streamed_s, overlap)


_DECODE_MEMO_SIZE = 1 << 18  # (batch, blocks, table) triples; a long run revisits few


class DecodeAttention:
    """One layer's decode attention for one model shape on one GPU: launch + smooth-max(the
    busiest SM's rounds of CTAs, the whole KV streamed) + the combine kernel. A step's
    CTAs, splits and rounds depend only on the batch and the mean and longest contexts in
    whole key blocks: memoised per such triple, so a span looks them up once per run of
    steps in the same blocks and prices only the streamed KV elementwise."""

    def __init__(self, times: KernelTimes, shape: LayerShape) -> None:
        f = times.fit
        self._times = times
        self._kernel = times.decode_kernel
        self._block = float(self._kernel.key_block)
        self._heads = shape.q_heads if self._kernel.per_query_head else shape.kv_heads
        self._query_heads = shape.q_heads
        self._head_bytes = 2.0 * shape.head_dim * shape.elem_bytes  # K and V, one key
        self._stream_s_per_key = self._heads * self._head_bytes / times.decode_stream_bytes_s
        self._launch_s = f.decode_attention_launch_s
        self._memo: dict[tuple[int, float, float], tuple[float, float]] = {}

    def steps_s(
        self, batch: int, context_sums: np.ndarray, context_maxes: np.ndarray
    ) -> np.ndarray:
        """Steps of `batch` sequences over `context_sums` keys in all, the longest
        `context_maxes` (0: unknown), as arrays over steps (a span, or one step)."""
        if len(context_sums) == 0:
            return np.zeros(0)
        means = context_sums / batch
        blocks = -(-means // self._block)
        tables = -(-np.maximum(context_maxes, means) // self._block)
        changed = (blocks[1:] != blocks[:-1]) | (tables[1:] != tables[:-1])
        if changed.any():
            starts = np.concatenate(([0], np.flatnonzero(changed) + 1))
            parts = [self._parts(batch, blocks[i], tables[i]) for i in starts]
            lengths = np.diff(np.append(starts, len(blocks)))
            busiest, combine = np.repeat(np.array(parts), lengths, axis=0).T  # (steps,) each
        else:  # one run: most spans
            busiest, combine = self._parts(batch, blocks[0], tables[0])
        return (
            self._launch_s
            + self._times.attention_overlap_s(busiest, context_sums * self._stream_s_per_key)
            + combine
        )

    def step_s(self, batch: int, context_sum: int, context_max: int) -> float:
        """One step in Python floats (a mixed step's decodes; inlined: it runs every step)."""
        block = self._block
        mean = context_sum / batch
        longest = context_max if context_max > mean else mean
        key = (batch, -(-mean // block), -(-longest // block))
        parts = self._memo.get(key)
        busiest, combine = self._parts(*key) if parts is None else parts
        streamed = context_sum * self._stream_s_per_key
        return self._launch_s + self._times.attention_overlap_s(busiest, streamed) + combine

    def _parts(self, batch: int, blocks: float, table_blocks: float) -> tuple[float, float]:
        """(the busiest SM's time, the combine kernel's), memoised."""
        key = (batch, blocks, table_blocks)
        parts = self._memo.get(key)
        if parts is None:
            if len(self._memo) > _DECODE_MEMO_SIZE:
                self._memo.clear()
            parts = self._memo[key] = self._parts_of(batch, int(blocks), int(table_blocks))
        return parts

    def _parts_of(self, batch: int, blocks: int, table_blocks: int) -> tuple[float, float]:
        t, f = self._times, self._times.fit
        work = decode_work(
            self._kernel, batch, self._heads, t.multiprocessors, blocks, table_blocks
        )
        cta_bytes = work.cta_keys * self._head_bytes
        busiest = busiest_sm_s(work.busiest_ctas, cta_bytes, t.lone_cta, t.shared_cta)
        if work.splits == 1:
            return busiest, 0.0
        merged = f.decode_combine_per_split_s * batch * self._query_heads * work.splits
        return busiest, f.decode_combine_launch_s + merged


class PrefillAttention:
    """One layer's prefill (and multi-query) attention for one model shape on one GPU:
    launch + smooth-max(the CTAs on the SMs, the whole KV streamed) + the combine kernel of
    a split. Not memoised per step (a step's chunk list rarely recurs); per chunk only over
    no cache (`prefill_attention.fresh_sums`, `unsplit_sums` says why)."""

    def __init__(self, times: KernelTimes, shape: LayerShape) -> None:
        f = times.fit
        self._times = times
        self._kernel = PREFILL_KERNELS[f.decode_attention_kernel]  # checked on load
        self._heads = shape.q_heads
        k = self._kernel
        sm_flops = times.peak_flops / times.multiprocessors
        sm_bytes = times.bandwidth / times.multiprocessors
        block_flops = 4.0 * k.query_block * k.key_block * shape.head_dim  # QKᵀ and PV
        copy_bytes = 2.0 * 2.0 * k.key_block * shape.head_dim * shape.elem_bytes  # K, V in, out
        self._lone = (
            f.prefill_cta_s,
            block_flops / (sm_flops * f.prefill_cta_flops_share),
            copy_bytes / (sm_bytes * f.prefill_copy_bandwidth_share),
        )
        self._shared = (
            f.prefill_shared_cta_s,
            block_flops / (sm_flops * f.prefill_shared_cta_flops_share),
            copy_bytes / (sm_bytes * f.prefill_shared_copy_bandwidth_share),
        )
        head_bytes = 2.0 * shape.head_dim * shape.elem_bytes  # K and V, one key
        self._stream_s_per_key = shape.kv_heads * head_bytes / times.decode_stream_bytes_s
        self._sms = times.multiprocessors
        self._slots = k.resident_ctas * times.multiprocessors

    def step_s(self, chunks: Sequence[tuple[int, int, int]]) -> float:
        """A step's causal chunks: (new tokens, cached tokens, sequences like it), as
        `prefill_work` takes them."""
        return self.work_s(self.work(chunks))

    def work(self, chunks: Sequence[tuple[int, int, int]], causal: bool = True) -> PrefillWork:
        """How the kernel lays out `chunks` (`prefill_work`) for this shape and GPU."""
        return prefill_work(self._kernel, chunks, self._heads, self._sms, causal)

    def works_s(self, works: Sequence[PrefillWork]) -> np.ndarray:
        """`work_s` of each of `works` (a profile's points)."""
        return np.fromiter((self.work_s(w) for w in works), dtype=np.float64, count=len(works))

    def work_s(self, work: PrefillWork) -> float:
        """The kernel's time for one step's `work` (Python floats: it runs every step that
        prefills): alone (no more CTAs than SMs), each CTA has its SM and the longest sets
        the time; shared, up to one wave the longer of the longest and the spread over the
        slots, past it the spread plus a share of the longest (the last CTAs start late)."""
        t, f = self._times, self._times.fit
        alone = work.ctas <= t.multiprocessors
        fixed, block_s, copy_s = self._lone if alone else self._shared
        longest = 0.0
        for b, c in work.longest:
            cta = b * block_s + c * copy_s
            if cta > longest:
                longest = cta
        longest += fixed
        body = longest
        if not alone:
            summed = work.ctas * fixed + work.blocks * block_s + work.copied * copy_s
            tail = f.prefill_tail_share * longest if work.ctas > self._slots else 0.0
            body = max(summed / self._slots + tail, longest)
        streamed = work.keys * self._stream_s_per_key
        combine = f.prefill_combine_s if work.splits > 1 else 0.0
        return f.prefill_attention_launch_s + t.attention_overlap_s(body, streamed) + combine


def _multiprocessors(gpu: GPUSpec) -> int:
    if gpu.multiprocessors is None:
        raise WorkbenchError(
            f"{gpu.name} has no multiprocessor count in the hardware catalog; the fitted "
            "decode attention needs one",
            field="hardware.gpu",
        )
    return gpu.multiprocessors
