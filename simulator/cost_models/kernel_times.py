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
Decode attention (one query per sequence): launch + per-sequence cost + KV bytes /
(bandwidth · η_a). Prefill and multi-query attention: launch + smooth_max(FLOPs /
(peak_flops · η_ac), bytes / (bandwidth · η_a)).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from simulator.catalogs.hardware import GPUSpec
from simulator.catalogs.kernel_fit import ELEMENTWISE_KINDS, KernelFit

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
        self._flops_rate = gpu.peak_flops(dtype)
        self._bandwidth = gpu.memory_bandwidth_bytes_s
        self._elementwise = {  # kind: (launch, bytes per second)
            kind: (
                getattr(fit, f"{kind}_launch_s"),
                self._bandwidth * getattr(fit, f"{kind}_memory_efficiency"),
            )
            for kind in ELEMENTWISE_KINDS
        }

    def gemm_s(self, m: np.ndarray, k: float, n: float) -> np.ndarray:
        """`m` (array) rows through a k × n weight matrix."""
        f = self.fit
        compute = 2.0 * padded_rows(m) * k * n / (self._flops_rate * f.gemm_compute_efficiency)
        moved = self.elem_bytes * (k * n + m * (k + n))
        memory = moved / (self._bandwidth * f.gemm_memory_efficiency)
        return f.gemm_launch_s + smooth_max(compute, memory, f.gemm_overlap)

    def elementwise_s(self, kind: str, moved_bytes: Times) -> Times:
        """A `kind` (`ELEMENTWISE_KINDS`) of elementwise kernel moving `moved_bytes`."""
        launch_s, rate = self._elementwise[kind]
        return launch_s + moved_bytes / rate

    def decode_attention_s(self, sequences: float | np.ndarray, kv_bytes: np.ndarray) -> np.ndarray:
        """One query per sequence against its KV (`kv_bytes` read in all). Elementwise
        + × ÷ only: decode spans and single steps agree bit for bit."""
        f = self.fit
        fixed = f.decode_attention_launch_s + f.decode_attention_per_sequence_s * sequences
        return fixed + kv_bytes / (self._bandwidth * f.attention_memory_efficiency)

    def prefill_attention_s(self, flops: Times, moved_bytes: Times) -> Times:
        """Chunks of several queries per sequence (prefill, verification), one launch."""
        f = self.fit
        compute = flops / (self._flops_rate * f.attention_compute_efficiency)
        memory = moved_bytes / (self._bandwidth * f.attention_memory_efficiency)
        return f.prefill_attention_launch_s + smooth_max(compute, memory, f.gemm_overlap)
