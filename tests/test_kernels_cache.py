"""Triton cache write and block copy equal the PyTorch references, bit for bit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_helpers import kernel_device  # noqa: E402

DEVICE = kernel_device()  # before triton is imported: the interpreter needs setting first
pytest.importorskip("triton")

from kernels import paged_attention as reference  # noqa: E402
from kernels import triton_cache  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def random_caches(gen, num_blocks, block_size, n_kv, head_dim, dtype, device=DEVICE):
    """Random (not zero) caches: an element the kernel fails to write keeps a wrong value."""
    shape = (num_blocks, block_size, n_kv, head_dim)
    k = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    return k, torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def distinct_slots(gen, n_tokens, n_slots, n_padding):
    """n_tokens distinct slots, n_padding of them replaced by -1, in random order."""
    slots = torch.randperm(n_slots, generator=gen)[:n_tokens]
    slots[torch.randperm(n_tokens, generator=gen)[:n_padding]] = -1
    return slots


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size, n_kv, head_dim", [(16, 2, 64), (32, 1, 128), (16, 3, 80)])
def test_write_kv_equals_reference(dtype, block_size, n_kv, head_dim):
    gen = torch.Generator().manual_seed(block_size + n_kv + head_dim)
    k_cache, v_cache = random_caches(gen, 5, block_size, n_kv, head_dim, dtype)
    n_tokens = 2 * block_size + 3
    slots = distinct_slots(gen, n_tokens, 5 * block_size, n_padding=4).to(DEVICE)
    k = torch.randn(n_tokens, n_kv, head_dim, generator=gen).to(DEVICE)  # fp32: cast on write
    v = torch.randn(n_tokens, n_kv, head_dim, generator=gen).to(DEVICE)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    reference.write_kv(expected_k, expected_v, k, v, slots)
    triton_cache.write_kv(k_cache, v_cache, k, v, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_write_kv_through_strided_inputs():
    """k/v as the model hands them: views of a wider projection output."""
    gen = torch.Generator().manual_seed(5)
    k_cache, v_cache = random_caches(gen, 4, 16, 2, 32, torch.float32)
    kv = torch.randn(7, 2, 2, 32, generator=gen).to(DEVICE)  # (N, k|v, n_kv, hd)
    slots = distinct_slots(gen, 7, 64, n_padding=1).to(DEVICE)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    reference.write_kv(expected_k, expected_v, kv[:, 0], kv[:, 1], slots)
    triton_cache.write_kv(k_cache, v_cache, kv[:, 0], kv[:, 1], slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size, n_kv, head_dim", [(16, 2, 64), (32, 4, 128)])
def test_copy_blocks_equals_reference(dtype, block_size, n_kv, head_dim):
    gen = torch.Generator().manual_seed(head_dim)
    k_cache, v_cache = random_caches(gen, 9, block_size, n_kv, head_dim, dtype)
    blocks = torch.randperm(9, generator=gen)
    src, dst = blocks[:3].to(DEVICE), blocks[3:6].to(DEVICE)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    reference.copy_blocks(expected_k, expected_v, src, dst)
    triton_cache.copy_blocks(k_cache, v_cache, src, dst)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_empty_calls_change_nothing():
    gen = torch.Generator().manual_seed(1)
    k_cache, v_cache = random_caches(gen, 2, 16, 1, 16, torch.float32)
    before = k_cache.clone()
    none = torch.empty(0, dtype=torch.long, device=DEVICE)
    triton_cache.copy_blocks(k_cache, v_cache, none, none)
    empty_kv = torch.empty(0, 1, 16, device=DEVICE)
    triton_cache.write_kv(k_cache, v_cache, empty_kv, empty_kv, none)
    assert torch.equal(k_cache, before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cache_kernels_on_cuda_at_scale(dtype):
    gen = torch.Generator().manual_seed(0)
    k_cache, v_cache = random_caches(gen, 2048, 16, 8, 128, dtype, "cuda")
    slots = distinct_slots(gen, 4096, 2048 * 16, n_padding=100).cuda()
    k = torch.randn(4096, 8, 128, generator=gen).to("cuda", dtype)
    v = torch.randn(4096, 8, 128, generator=gen).to("cuda", dtype)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    reference.write_kv(expected_k, expected_v, k, v, slots)
    triton_cache.write_kv(k_cache, v_cache, k, v, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    blocks = torch.randperm(2048, generator=gen).cuda()
    reference.copy_blocks(expected_k, expected_v, blocks[:500], blocks[500:1000])
    triton_cache.copy_blocks(k_cache, v_cache, blocks[:500], blocks[500:1000])
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
