"""Tensor-parallel collectives: the all-reduces a Megatron-style layer makes."""

from __future__ import annotations


def ring_all_reduces_s(
    tokens: int,
    hidden: int,
    elem_bytes: int,
    num_layers: int,
    tensor_parallel: int,
    link_bytes_s: float,
    latency_s: float,
) -> float:
    """Two ring all-reduces per layer (after the O projection and after the MLP down
    projection) of the step's hidden states: 2(t−1)/t × bytes over the link, plus a fixed
    latency each."""
    t = tensor_parallel
    if t == 1 or tokens == 0:
        return 0.0
    message = float(tokens * hidden * elem_bytes)
    one = 2.0 * (t - 1) / t * message / link_bytes_s + latency_s
    return 2 * num_layers * one
