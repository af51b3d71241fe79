"""KV-cache capacity of one replica, derived the way vLLM sizes its block pool.

vLLM loads the weights, runs one profiling forward pass at the largest batch it will
schedule, and gives what is left of `gpu_memory_utilization × memory` to KV blocks. We
cannot profile, so the activation peak is estimated (see `activation_reserve_bytes`).
"""

from __future__ import annotations

from simulator.catalogs.hardware import GPUSpec
from simulator.catalogs.models import ModelSpec, dtype_bytes
from workbench.errors import WorkbenchError
from workbench.scenario.system import KVCacheConfig

_GIB = 1 << 30

# CUDA context, cuBLAS/NCCL workspaces and CUDA graphs: vLLM's "non-torch" memory is
# typically 0.5-1.5 GiB per GPU; 1 GiB is the middle of that range.
RUNTIME_RESERVE_BYTES_PER_GPU = 1 * _GIB

# vLLM's default token budget per step with chunked prefill off (and this project's
# scheduler default): the profiling pass runs this many tokens at once.
DEFAULT_MAX_BATCHED_TOKENS = 8192


def activation_reserve_bytes(
    model: ModelSpec, tensor_parallel: int, dtype: str, max_batched_tokens: int
) -> int:
    """Peak activations of one forward over `max_batched_tokens`, plus runtime overhead, for
    the whole replica.

    Per token and GPU the peak sits in the MLP: the residual stream and its normed copy
    (2 × hidden, replicated on every GPU), the fused gate/up output (2 × intermediate / TP)
    and the activated product (intermediate / TP). The attention block's QKV output is
    smaller, and other layers' buffers are freed by then.
    """
    per_token_gpu = 2 * model.hidden_size + 3 * model.intermediate_size // tensor_parallel
    activations = max_batched_tokens * per_token_gpu * dtype_bytes(dtype)
    return tensor_parallel * (activations + RUNTIME_RESERVE_BYTES_PER_GPU)


def kv_bytes_per_token_replica(model: ModelSpec, tensor_parallel: int, dtype: str) -> int:
    """KV bytes per token over all GPUs of a replica: when TP exceeds the KV-head count,
    engines replicate KV heads so each GPU holds at least one."""
    per_head = model.kv_bytes_per_token(dtype_bytes(dtype)) // model.num_kv_heads
    return per_head * max(model.num_kv_heads, tensor_parallel)


def kv_capacity_blocks(
    model: ModelSpec,
    gpu: GPUSpec,
    tensor_parallel: int,
    dtype: str,
    kv: KVCacheConfig,
    max_batched_tokens: int = DEFAULT_MAX_BATCHED_TOKENS,
    draft: ModelSpec | None = None,
) -> int:
    """KV blocks of one replica: `kv.num_blocks` if given, else what the memory leaves.

    A speculative decoder's `draft` lives on the same GPUs: its weights come off the budget
    and every block holds the draft's KV of its tokens too (vLLM sizes both caches alike).
    """
    if kv.num_blocks is not None:
        return kv.num_blocks
    budget = int(kv.gpu_memory_utilization * gpu.memory_bytes) * tensor_parallel
    usable = budget - activation_reserve_bytes(model, tensor_parallel, dtype, max_batched_tokens)
    weights = model.weight_bytes(dtype_bytes(dtype))
    block_bytes = kv.block_size * kv_bytes_per_token_replica(model, tensor_parallel, dtype)
    if draft is not None:
        weights += draft.weight_bytes(dtype_bytes(dtype))
        block_bytes += kv.block_size * kv_bytes_per_token_replica(draft, tensor_parallel, dtype)
    if weights + block_bytes > usable:
        raise WorkbenchError(
            f"{model.name} {dtype} needs {weights / _GIB:.1f} GiB of weights; "
            f"{tensor_parallel}× {gpu.name} has {max(usable, 0) / _GIB:.1f} GiB usable "
            f"(gpu_memory_utilization {kv.gpu_memory_utilization} less activations); "
            "raise hardware.tensor_parallel",
            field="hardware.tensor_parallel",
        )
    return (usable - weights) // block_bytes
