"""A linear layer's weight prepared for inference, with oneDNN's prepacked GEMM on CPU.

On CPU, `F.linear` over a few rows (a verification chain, a lookahead window, a small
batch) goes through MKL's GEMM, which repacks the whole weight on every call: on the zoo
target, 5 rows cost 4.5x one row, and the weight is read once either way. oneDNN's linear
on a weight reordered once into its blocked layout skips that (2.3x faster at 5 rows, 2.4x
at 31, one thread on the development machine: `benchmarks/cpu_linear.py`). One row stays
on `F.linear`, whose GEMV reads the plain weight faster still. The packed copy doubles the
weights' memory, so it is for CPU fp32 only, where the models are small.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def can_prepack(weight: torch.Tensor) -> bool:
    """oneDNN prepacking applies: a CPU fp32 weight and a PyTorch built with oneDNN."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
    )


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
