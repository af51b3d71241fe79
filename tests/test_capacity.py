"""KV capacity from memory: weights, activation reserve, blocks; the too-big error."""

from __future__ import annotations

import pytest

from simulator.capacity import kv_bytes_per_token_replica, kv_capacity_blocks, swap_space
from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import get_model
from workbench.errors import WorkbenchError
from workbench.scenario.system import KVCacheConfig

GIB = 1 << 30


def test_70b_on_one_a100_raises_naming_tensor_parallel() -> None:
    with pytest.raises(WorkbenchError, match="GiB of weights") as info:
        kv_capacity_blocks(
            get_model("llama-2-70b"), get_gpu("a100-80gb"), 1, "fp16", KVCacheConfig()
        )
    assert info.value.field == "hardware.tensor_parallel"
    assert "llama-2-70b fp16" in str(info.value)
    assert "1× a100-80gb" in str(info.value)


def test_7b_on_a100_blocks_fill_what_weights_leave() -> None:
    model, gpu, kv = get_model("llama-2-7b"), get_gpu("a100-80gb"), KVCacheConfig()
    blocks = kv_capacity_blocks(model, gpu, 1, "fp16", kv)
    kv_gib = blocks * kv.block_size * model.kv_bytes_per_token(2) / GIB
    after_weights_gib = (0.9 * gpu.memory_bytes - model.weight_bytes(2)) / GIB  # ≈ 59.4
    # The activation/runtime reserve takes a GiB or two, never more than 3.
    assert after_weights_gib - 3 < kv_gib < after_weights_gib
    assert 7000 < blocks < 7600  # ≈ 58 GiB of 8 MiB blocks


def test_tp2_fits_70b_and_more_memory_means_more_blocks() -> None:
    model, kv = get_model("llama-2-70b"), KVCacheConfig()
    tp2 = kv_capacity_blocks(model, get_gpu("a100-80gb"), 2, "fp16", kv)
    tp4 = kv_capacity_blocks(model, get_gpu("a100-80gb"), 4, "fp16", kv)
    h200 = kv_capacity_blocks(model, get_gpu("h200"), 2, "fp16", kv)
    assert 0 < tp2 < tp4
    assert tp2 < h200


def test_lower_utilization_means_fewer_blocks() -> None:
    model, gpu = get_model("llama-3-8b"), get_gpu("h100-sxm")
    full = kv_capacity_blocks(model, gpu, 1, "bf16", KVCacheConfig(gpu_memory_utilization=0.9))
    half = kv_capacity_blocks(model, gpu, 1, "bf16", KVCacheConfig(gpu_memory_utilization=0.5))
    assert half < full


def test_num_blocks_overrides() -> None:
    kv = KVCacheConfig(num_blocks=123)
    assert kv_capacity_blocks(get_model("llama-2-70b"), get_gpu("l40s"), 1, "fp16", kv) == 123


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    qwen = get_model("qwen2-7b")  # 4 KV heads
    assert kv_bytes_per_token_replica(qwen, 4, "fp16") == qwen.kv_bytes_per_token(2)
    assert kv_bytes_per_token_replica(qwen, 8, "fp16") == 2 * qwen.kv_bytes_per_token(2)


@pytest.mark.parametrize(("tp", "per_gpu_kib"), [(1, 2048), (2, 1024), (8, 256), (16, 256)])
def test_swap_space_counts_one_gpus_share_of_a_block(tp: int, per_gpu_kib: int) -> None:
    """vLLM's swap_space is per GPU, in blocks of one GPU's share: llama-3-8b bf16 keeps 128
    KiB a token over 8 KV heads; past 8 ranks the heads are replicated, one per GPU."""
    kv = KVCacheConfig(swap_space_gib=4)
    swap = swap_space(get_model("llama-3-8b"), get_gpu("h100-sxm"), tp, "bf16", kv)
    assert swap.blocks == 4 * GIB // (per_gpu_kib * 1024)
    assert swap.block_s == pytest.approx(per_gpu_kib * 1024 / 64e9)  # PCIe Gen5, one way
    assert (
        swap_space(
            get_model("llama-3-8b"),
            get_gpu("h100-sxm"),
            tp,
            "bf16",
            KVCacheConfig(swap_space_gib=0),
        ).blocks
        == 0
    )
