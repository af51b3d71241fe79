"""Roofline cost model: a step takes max(FLOPs / compute rate, bytes / memory rate), plus
tensor-parallel all-reduces and a fixed per-step overhead.

Counting rules (per step, whole replica; split evenly over the TP GPUs):
- GEMM FLOPs: 2 × layer weights × every token in the step.
- LM-head FLOPs: only tokens whose logits are sampled: every decode token and one token per
  prefill chunk (strictly only a prompt's *last* chunk needs logits; engines compute the last
  position of every chunk, and the difference is one GEMV row per chunk).
- Attention FLOPs: 4 · layers · heads · head_dim per (query, key) pair; a chunk of c over p
  cached tokens has c·(p + c/2) pairs, a decode token of context k has k (so does each
  extra token of a multi-token decode: its sequence's KV plus the step's earlier tokens).
- Bytes: all streamed weights once per step, the KV read (cached tokens) and written (new
  tokens), plus activation traffic (`ACTIVATION_VECTORS_*` below).
- All-reduce (TP > 1): two per layer (after the O projection and after the MLP down
  projection) of tokens × hidden × dtype bytes, as a ring: 2(t−1)/t × bytes / link + latency.
"""

from __future__ import annotations

import numpy as np

from simulator.catalogs.hardware import GPUSpec
from simulator.catalogs.models import ModelSpec, dtype_bytes
from simulator.cost_models.base import SplitCostModel, StepWork
from simulator.cost_models.collectives import ring_all_reduces_s
from workbench.scenario.system import RooflineCostConfig

# Per token and layer, elementwise ops and GEMM inputs/outputs touch about ten hidden-sized
# vectors (norm in/out ×2, QKV/O in/out, residual adds) and four intermediate-sized ones
# (gate, up, activation, down input): small next to weights except at very large batches.
ACTIVATION_VECTORS_HIDDEN = 10
ACTIVATION_VECTORS_INTERMEDIATE = 4


class RooflineCostModel(SplitCostModel):
    """Step times from the hardware and model catalogs."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tensor_parallel: int,
        dtype: str,
        cfg: RooflineCostConfig,
    ) -> None:
        self.model = model
        self.gpu = gpu
        self.tensor_parallel = tensor_parallel
        self.dtype = dtype
        self.cfg = cfg
        elem = dtype_bytes(dtype)
        self._elem_bytes = elem
        self._flops_rate = tensor_parallel * gpu.peak_flops(dtype) * cfg.compute_efficiency
        self._bytes_rate = tensor_parallel * gpu.memory_bandwidth_bytes_s * cfg.memory_efficiency
        self._weight_bytes = float(model.streamed_weight_bytes(elem))
        self._kv_bytes_per_token = float(model.kv_bytes_per_token(elem))
        self._activation_bytes_per_token = float(
            model.num_layers
            * elem
            * (
                ACTIVATION_VECTORS_HIDDEN * model.hidden_size
                + ACTIVATION_VECTORS_INTERMEDIATE * model.intermediate_size
            )
        )
        self._overhead_s = cfg.step_overhead_ms / 1000.0

    # ---------------------------------------------------------------- the two step shapes

    def _decode_times_s(
        self, batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray
    ) -> np.ndarray:
        """Decode-only steps, one per context sum (each sequence's own keys read: the
        longest context does not matter). The only path for decode-only steps, so
        `step_time_s` and `decode_span_s` agree bit for bit: elementwise + − × ÷ and
        np.maximum only, whose rounding cannot depend on the array's length."""
        if batch_size == 0:
            return np.full(context_sums.shape, self._overhead_s)
        m = self.model
        b = float(batch_size)
        fixed_flops = b * float(m.linear_flops_per_token + m.lm_head_flops_per_token)
        fixed_bytes = self._weight_bytes + b * (
            self._kv_bytes_per_token + self._activation_bytes_per_token
        )
        flops = fixed_flops + float(m.attention_flops_per_query_key) * context_sums
        moved = fixed_bytes + self._kv_bytes_per_token * context_sums
        busy = np.maximum(flops / self._flops_rate, moved / self._bytes_rate)
        return busy + (self._all_reduce_s(batch_size) + self._overhead_s)

    def _mixed_time_s(self, work: StepWork) -> float:
        """Steps with prefill chunks or multi-token decodes (and possibly plain decodes).

        A verified draft token needs its logits and attends like a decode token; the KV of
        its sequence is read once for all of them (one multi-query attention per sequence).
        """
        m = self.model
        tokens = work.num_tokens
        logit_tokens = (
            work.decode_batch_size + work.decode_extra_tokens + len(work.prefill_chunk_tokens)
        )
        attention = float(
            m.decode_attention_flops(work.decode_context_sum + work.decode_extra_context_sum)
        )
        cached = sum(work.prefill_context_tokens)
        for chunk, context in zip(
            work.prefill_chunk_tokens, work.prefill_context_tokens, strict=True
        ):
            attention += m.prefill_attention_flops(chunk, context)
        flops = (
            tokens * float(m.linear_flops_per_token)
            + logit_tokens * float(m.lm_head_flops_per_token)
            + attention
        )
        # KV read: decode contexts and cached prefixes; written: every new token.
        kv_tokens = work.decode_context_sum + cached + tokens
        moved = (
            self._weight_bytes
            + self._kv_bytes_per_token * kv_tokens
            + self._activation_bytes_per_token * tokens
        )
        busy = max(flops / self._flops_rate, moved / self._bytes_rate)
        return busy + self._all_reduce_s(tokens) + self._overhead_s

    # ---------------------------------------------------- one layer's parts (fidelity check)

    def token_ops_layer_s(self, tokens: int) -> float:
        """The roofline's price of one layer's token-level ops (GEMMs and activation
        traffic) at `tokens` per step: the work Vidur's mlp.csv profiles."""
        m = self.model
        flops = tokens * float(m.linear_params_per_layer) * 2.0
        moved = float(m.linear_params_per_layer * self._elem_bytes) + tokens * (
            self._activation_bytes_per_token / m.num_layers
        )
        return max(flops / self._flops_rate, moved / self._bytes_rate)

    def decode_attention_layer_s(self, batch: int, kv_tokens: int) -> float:
        """One layer's decode attention: `batch` queries over `kv_tokens` keys in all."""
        m = self.model
        flops = float(m.attention_flops_per_query_key) / m.num_layers * kv_tokens
        moved = self._kv_bytes_per_token / m.num_layers * kv_tokens
        return max(flops / self._flops_rate, moved / self._bytes_rate)

    def prefill_attention_layer_s(self, chunk: int, cached: int) -> float:
        """One layer's attention for a prefill chunk over `cached` tokens."""
        m = self.model
        flops = m.prefill_attention_flops(chunk, cached) / m.num_layers
        moved = self._kv_bytes_per_token / m.num_layers * (cached + chunk)
        return max(flops / self._flops_rate, moved / self._bytes_rate)

    def _all_reduce_s(self, tokens: int) -> float:
        link = self.gpu.interconnect_bandwidth_bytes_s * self.cfg.interconnect_efficiency
        m = self.model
        return ring_all_reduces_s(
            tokens, m.hidden_size, self._elem_bytes, m.num_layers, self.tensor_parallel, link,
            self.gpu.collective_latency_s,
        )  # fmt: skip
