"""Fitted kernel cost model: a step is the sum of its kernels, each priced by its shape with
the GPU's fitted parameters (`KernelFit`, `kernel_times.py`).

Per layer, on one of the TP GPUs: the token-level ops at the step's token count (four GEMMs
and five elementwise kernels, `layer_ops.py`), the attention kernels and, with TP > 1, two
ring all-reduces. Once per step: the embedding gather, the final norm, the LM head (a GEMM
over the tokens whose logits are sampled), `step_overhead_ms` (CPU scheduling) and
`layer_overhead_ms` per layer (an eager framework's host time, e.g. Hugging Face without
CUDA graphs; it applies to a draft model's forwards with the draft's own layer count).

Attention: plain decodes (one query per sequence) run the decode kernel, priced by how it
lays its CTAs on the SMs (`decode_attention.py`). Prefill chunks and multi-token decodes
(speculative verification, lookahead windows: several queries per sequence) run the
prefill kernel, one launch for all of them, priced by its CTAs on the SMs
(`prefill_attention.py`); a multi-token decode's windows count as chunks, the longest
sequence's over its own cached keys and the others' over their mean (`verified_chunks`).
So multi-token steps are priced through the same fitted GEMM curve as any batch: 121 tokens
cost what the measured GEMMs say 121 rows cost.
"""

from __future__ import annotations

import numpy as np

from simulator.catalogs.hardware import GPUSpec
from simulator.catalogs.kernel_fit import KernelFit
from simulator.catalogs.models import ModelSpec, dtype_bytes
from simulator.cost_models.base import SplitCostModel, StepWork
from simulator.cost_models.collectives import ring_all_reduces_s
from simulator.cost_models.kernel_times import KernelTimes
from simulator.cost_models.layer_ops import LayerShape, TokenOp
from workbench.scenario.system import FittedCostConfig


class FittedCostModel(SplitCostModel):
    """Step times from a GPU's fitted kernel parameters and the model's shape."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        fit: KernelFit,
        tensor_parallel: int,
        dtype: str,
        cfg: FittedCostConfig,
    ) -> None:
        self.model = model
        self.gpu = gpu
        self.fit = fit
        self.tensor_parallel = tensor_parallel
        self.cfg = cfg
        elem = dtype_bytes(dtype)
        self._elem_bytes = elem
        self._times = KernelTimes(gpu, fit, dtype, elem)
        self._shape = LayerShape.of(model, tensor_parallel, elem)
        self._decode = self._times.decode(self._shape)
        self._prefill = self._times.prefill(self._shape)
        self._ops = self._shape.token_ops()
        self._layers = float(model.num_layers)
        overhead_ms = cfg.step_overhead_ms + cfg.layer_overhead_ms * model.num_layers
        self._overhead_s = overhead_ms / 1000.0
        self._link_bytes_s = gpu.interconnect_bandwidth_bytes_s * cfg.interconnect_efficiency
        # Costs that depend only on a token count, filled on first use (a few hundred
        # distinct counts recur all run long).
        self._tokens_memo: dict[int, float] = {}
        self._logits_memo: dict[int, float] = {}

    # ---------------------------------------------------------------- the two step shapes

    def _decode_times_s(
        self, batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray
    ) -> np.ndarray:
        """Decode-only steps, one per (context sum, longest context): the only path for
        them, elementwise over steps, so `step_time_s` and `decode_span_s` agree bit for
        bit. The longest context sizes the decode kernel's split of the work."""
        if batch_size == 0:
            return np.full(context_sums.shape, self._overhead_s)
        fixed = self._token_level_s(batch_size) + self._logits_s(batch_size)
        per_layer = self._decode.steps_s(batch_size, context_sums, context_maxes)
        return per_layer * self._layers + fixed

    def _mixed_time_s(self, work: StepWork) -> float:
        logits = work.decode_batch_size + work.decode_extra_tokens + len(work.prefill_chunk_tokens)
        fixed = self._token_level_s(work.num_tokens) + self._logits_s(logits)
        return self._attention_layer_s(work) * self._layers + fixed

    # ---------------------------------------------------------------- parts of a step

    def _attention_layer_s(self, work: StepWork) -> float:
        """One layer's attention kernels: the decode kernel for plain decodes, the prefill
        kernel (one launch) for prefill chunks and multi-query verification."""
        total = 0.0
        pairs = zip(work.prefill_chunk_tokens, work.prefill_context_tokens, strict=True)
        chunks = [(c, p, 1) for c, p in pairs]
        if work.decode_extra_tokens:
            chunks.extend(verified_chunks(work))
        elif work.decode_batch_size:
            total += self._decode.step_s(
                work.decode_batch_size, work.decode_context_sum, work.decode_context_max
            )
        if chunks:
            total += self._prefill.step_s(chunks)
        return total

    def _token_level_s(self, tokens: int) -> float:
        """Every layer's token-level ops and all-reduces, plus the embedding gather."""
        memo = self._tokens_memo.get(tokens)
        if memo is None:
            m = self.model
            layer = self.token_ops_layer_s(tokens)
            all_reduce = ring_all_reduces_s(
                tokens, m.hidden_size, self._elem_bytes, m.num_layers, self.tensor_parallel,
                self._link_bytes_s, self.gpu.collective_latency_s,
            )  # fmt: skip
            embedding = self._op_s(self._shape.embedding(), tokens)
            memo = self._tokens_memo[tokens] = layer * self._layers + all_reduce + embedding
        return memo

    def _logits_s(self, logits: int) -> float:
        """Final norm and LM head over the tokens sampled, plus the step overhead."""
        memo = self._logits_memo.get(logits)
        if memo is None:
            norm = self._shape.norm("final_norm")
            head = self._op_s(norm, logits) + self._op_s(self._shape.lm_head(), logits)
            memo = self._logits_memo[logits] = head + self._overhead_s
        return memo

    def _op_s(self, op: TokenOp, tokens: int) -> float:
        if tokens == 0:
            return 0.0
        if op.gemm is not None:
            k, n = op.gemm
            return float(self._times.gemm_s(np.float64(tokens), float(k), float(n)))
        return self._times.elementwise_s(op.kind, tokens * op.bytes_per_token)

    # ---------------------------------------------------- one layer's parts (fidelity check)

    def token_ops_layer_s(self, tokens: int) -> float:
        """One layer's token-level ops at `tokens` per step: what Vidur's mlp.csv profiles."""
        return sum(self._op_s(op, tokens) for op in self._ops)

    def decode_attention_layer_s(self, batch: int, kv_tokens: int, longest: int = 0) -> float:
        """One layer's decode attention: `batch` sequences reading `kv_tokens` keys in all,
        the longest `longest` (0: all alike)."""
        return self._decode.step_s(batch, kv_tokens, longest)

    def prefill_attention_layer_s(self, chunk: int, cached: int) -> float:
        """One layer's attention for one prefill chunk over `cached` tokens."""
        return self._attention_layer_s(
            StepWork(prefill_chunk_tokens=(chunk,), prefill_context_tokens=(cached,))
        )


def verified_chunks(work: StepWork) -> list[tuple[int, int, int]]:
    """A multi-token decode as prefill chunks: its sequences' windows (the tokens spread
    evenly, the wider ones first when they do not divide) over cached keys: the longest
    sequence's own (it sets the longest CTA and the split), the others' mean."""
    batch = work.decode_batch_size
    assert batch > 0, "a multi-token decode step without decoding sequences"
    narrow, wider = divmod(batch + work.decode_extra_tokens, batch)
    longest = work.decode_context_max
    if batch == 1 or longest * batch <= work.decode_context_sum:  # all alike, or not known
        return _windows(narrow, wider, batch, work.decode_context_sum / batch)
    rest = (work.decode_context_sum - longest) / (batch - 1)
    first = narrow + 1 if wider else narrow
    return [(first, longest - 1, 1), *_windows(narrow, max(wider - 1, 0), batch - 1, rest)]


def _windows(
    narrow: int, wider: int, count: int, mean_context: float
) -> list[tuple[int, int, int]]:
    """`count` windows of `narrow` tokens, `wider` of them one more, over the keys before
    them (`mean_context` counts each window's first token)."""
    cached = max(round(mean_context) - 1, 0)
    chunks = [(narrow + 1, cached, wider)] if wider else []
    return [*chunks, (narrow, cached, count - wider)]  # wider < count: divmod's remainder
