"""KV-cache capacity of one replica, derived the way vLLM (or Vidur) sizes its block pool.

vLLM loads the weights, runs one profiling forward pass at the largest batch it will
schedule, and gives what is left of `gpu_memory_utilization × memory` to KV blocks. We
cannot profile, so the activation peak is estimated (see `activation_reserve_bytes`) for
the step's real token budget. Vidur's memory planner (`kv_cache.sizing: vidur`) instead
counts whole request slots of `max_request_tokens` (see `vidur_capacity_blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def check_tensor_parallel(model: ModelSpec, tensor_parallel: int) -> None:
    """A TP degree splits the query heads evenly, and the KV heads evenly or, past their
    count, replicates each on a whole number of GPUs (vLLM's rule)."""
    if _splits_heads(model, tensor_parallel):
        return
    valid = [d for d in range(1, model.num_attention_heads + 1) if _splits_heads(model, d)]
    raise WorkbenchError(
        f"tensor_parallel {tensor_parallel} does not split {model.name}'s "
        f"{model.num_attention_heads} query and {model.num_kv_heads} KV heads evenly; "
        f"valid degrees: {', '.join(map(str, valid))}",
        field="hardware.tensor_parallel",
    )


def _splits_heads(model: ModelSpec, degree: int) -> bool:
    kv = model.num_kv_heads
    kv_ok = kv % degree == 0 if degree <= kv else degree % kv == 0
    return model.num_attention_heads % degree == 0 and kv_ok


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


def vidur_capacity_blocks(
    model: ModelSpec,
    gpu: GPUSpec,
    tensor_parallel: int,
    dtype: str,
    kv: KVCacheConfig,
    pipeline_parallel: int = 1,
) -> int:
    """Vidur's memory planner: `memory × utilisation` less one device's transformer-layer
    weights (its stage's layers; no embedding, no LM head, no activation reserve) holds
    whole request slots of `max_request_tokens` KV (K and V of every layer of the model,
    as Vidur counts it even with pipeline stages, KV heads rounded up per device); the pool
    is that many slots per stage of `max_request_tokens // block_size` blocks."""
    assert kv.max_request_tokens is not None  # KVCacheConfig requires it for sizing vidur
    width = dtype_bytes(dtype)
    q_heads = model.num_attention_heads // tensor_parallel
    kv_heads = -(-model.num_kv_heads // tensor_parallel)
    attention = model.hidden_size * model.head_dim * (2 * q_heads + 2 * kv_heads)  # q, k, v, o
    mlp = (3 if model.gated_mlp else 2) * model.hidden_size * model.intermediate_size
    stage_layers = model.num_layers // pipeline_parallel
    weights = width * stage_layers * (attention + mlp // tensor_parallel)
    slot = 2 * width * model.head_dim * kv_heads * kv.max_request_tokens * model.num_layers
    slots = (int(gpu.memory_bytes * kv.gpu_memory_utilization) - weights) // slot
    if slots < 1:
        raise WorkbenchError(
            f"Vidur's planner fits no request of {kv.max_request_tokens} tokens: "
            f"{model.name} needs {weights / _GIB:.1f} GiB of layer weights per GPU on "
            f"{tensor_parallel}× {gpu.name}; raise hardware.tensor_parallel",
            field="hardware.tensor_parallel",
        )
    return slots * pipeline_parallel * (kv.max_request_tokens // kv.block_size)


def kv_capacity_blocks(
    model: ModelSpec,
    gpu: GPUSpec,
    tensor_parallel: int,
    dtype: str,
    kv: KVCacheConfig,
    max_batched_tokens: int = DEFAULT_MAX_BATCHED_TOKENS,
    draft: ModelSpec | None = None,
    pipeline_parallel: int = 1,
) -> int:
    """KV blocks of one replica: `kv.num_blocks` if given, else what the memory leaves.

    A speculative decoder's `draft` lives on the same GPUs: its weights come off the budget
    and every block holds the draft's KV of its tokens too (vLLM sizes both caches alike).
    Pipeline parallelism spreads weights and KV over `pipeline_parallel` times the GPUs,
    each with its own activation and runtime reserve.
    """
    if kv.num_blocks is not None:
        return kv.num_blocks
    if kv.sizing == "vidur":
        if draft is not None:
            raise WorkbenchError(
                "Vidur's planner sizes one model's cache; use sizing vllm with a draft model",
                field="scheduler.kv_cache.sizing",
            )
        return vidur_capacity_blocks(model, gpu, tensor_parallel, dtype, kv, pipeline_parallel)
    gpus = tensor_parallel * pipeline_parallel
    budget = int(kv.gpu_memory_utilization * gpu.memory_bytes) * gpus
    reserve = activation_reserve_bytes(model, tensor_parallel, dtype, max_batched_tokens)
    usable = budget - pipeline_parallel * reserve
    weights = model.weight_bytes(dtype_bytes(dtype))
    block_bytes = kv.block_size * kv_bytes_per_token_replica(model, tensor_parallel, dtype)
    if draft is not None:
        weights += draft.weight_bytes(dtype_bytes(dtype))
        block_bytes += kv.block_size * kv_bytes_per_token_replica(draft, tensor_parallel, dtype)
    if weights + block_bytes > usable:
        raise WorkbenchError(
            f"{model.name} {dtype} needs {weights / _GIB:.1f} GiB of weights; "
            f"{gpus}× {gpu.name} has {max(usable, 0) / _GIB:.1f} GiB usable "
            f"(gpu_memory_utilization {kv.gpu_memory_utilization} less activations); "
            "raise hardware.tensor_parallel",
            field="hardware.tensor_parallel",
        )
    return (usable - weights) // block_bytes


@dataclass(frozen=True)
class SwapSpace:
    """Host memory an engine swaps KV out to (APAR's requests with several branches)."""

    blocks: int  # KV blocks it holds
    block_s: float  # seconds to move one block over the host link, one way


NO_SWAP = SwapSpace(0, 0.0)


def swap_space(
    model: ModelSpec, gpu: GPUSpec, tensor_parallel: int, dtype: str, kv: KVCacheConfig
) -> SwapSpace:
    """vLLM's: `swap_space_gib` per GPU, counted in blocks of one GPU's share of a block;
    each GPU moves its share over its own host link, all at once."""
    per_gpu = kv.block_size * kv_bytes_per_token_replica(model, tensor_parallel, dtype)
    per_gpu /= tensor_parallel
    blocks = int(kv.swap_space_gib * _GIB // per_gpu)
    return SwapSpace(blocks, per_gpu / gpu.host_bandwidth_bytes_s)
