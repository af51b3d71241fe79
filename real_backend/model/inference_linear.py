"""A linear layer's weight prepared for inference, with oneDNN's prepacked GEMM on CPU.

On CPU, `F.linear` over a few rows (a verification chain, a lookahead window, a small
batch, an APAR request's branches) goes through MKL's GEMM. On an AMD CPU, MKL takes its
generic code path (it keeps its fast kernels for Intel's CPUs), which repacks the whole
weight on every call: on the zoo target, 5 rows cost 4.5x one row, and oneDNN's linear on
a weight reordered once into its blocked layout was 2.3x faster at 5 rows, 2.4x at 31 (one
thread, AMD EPYC). On an Intel CPU MKL's own small-matrix path is the faster one: 2-3 rows
cost what one row does, where the prepacked weight costs 1.5x as much (1.9x with two
threads); from 4 rows on the two are within 11 % with one thread, and MKL stays ahead
with two (Intel Xeon; `benchmarks/cpu_linear.py`). So weights are prepacked by default only
where MKL is not on its own ground. One row stays on `F.linear` either way, whose GEMV
reads the plain weight faster still. The packed copy doubles the weights' memory, so it is
for CPU fp32 only, where the models are small.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from real_backend.cpu_info import cpuinfo_field

INTEL = "GenuineIntel"  # the CPUID vendor string of Intel's CPUs
PREPACKED, PLAIN = "onednn-prepacked", "aten"  # what runs the linear layers, as recorded


def can_prepack(dtype: torch.dtype, device_type: str) -> bool:
    """oneDNN prepacking applies: CPU fp32 weights and a PyTorch built with oneDNN."""
    return device_type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


def prepack_pays(dtype: torch.dtype, device_type: str, vendor: str | None = None) -> bool:
    """Prepacking applies and beats `F.linear`: unless MKL runs `F.linear` on an Intel CPU.
    `vendor`: the CPU's vendor string (default: this machine's; "" when unknown, as on a
    system without /proc/cpuinfo, keeps the prepacked weights)."""
    vendor = cpuinfo_field("vendor_id") if vendor is None else vendor
    mkl_at_home = torch.backends.mkl.is_available() and vendor == INTEL
    return can_prepack(dtype, device_type) and not mkl_at_home


def default_linear(dtype: torch.dtype, device_type: str) -> str:
    """What runs a model's linear layers by default (`Transformer.fuse`) on this machine."""
    return PREPACKED if prepack_pays(dtype, device_type) else PLAIN


class InferenceLinear:
    """y = x W^T + b for packed rows x (N, in) -> (N, out); W, b as the layer holds them."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, prepack: bool) -> None:
        self.weight = weight.detach()  # (out, in)
        self.bias = None if bias is None else bias.detach()  # (out,)
        self.packed = (
            torch.ops.mkldnn._reorder_linear_weight(self.weight, None) if prepack else None
        )  # oneDNN's blocked layout of W, an opaque tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None or x.shape[0] == 1:  # one row: a GEMV on the plain weight
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
