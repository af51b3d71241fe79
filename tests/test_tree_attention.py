"""The paged tree-attention reference equals a naive dense attention over gathered K/V."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kernels.paged_attention import copy_blocks, paged_tree_attention, write_kv  # noqa: E402


def _random_tree_mask(gen: torch.Generator, n: int) -> torch.Tensor:
    """A random tree over n new tokens: parent[i] in [-1, i); row i = row parent + i."""
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        parent = int(torch.randint(-1, i, (1,), generator=gen)) if i else -1
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    return mask


def _naive(q, k_seq, v_seq, ctx, n, mask, scale):
    """One sequence, loops: q (n, nh, hd), k_seq/v_seq (ctx+n, n_kv, hd)."""
    nh, n_kv = q.shape[1], k_seq.shape[1]
    out = torch.zeros_like(q)
    for i in range(n):
        keys = list(range(ctx)) + [ctx + j for j in range(n) if mask[i, j]]
        for h in range(nh):
            kh = h // (nh // n_kv)
            kk = k_seq[keys, kh]  # (m, hd)
            vv = v_seq[keys, kh]
            w = torch.softmax(kk @ q[i, h] * scale, dim=0)
            out[i, h] = w @ vv
    return out


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paged_equals_dense(group, tree, seed):
    gen = torch.Generator().manual_seed(seed)
    block_size, n_kv, hd = 4, 2, 8
    nh = n_kv * group
    num_blocks = 40
    context_lens = [0, 5, 8, 3]
    new_lens = [3, 1, 4, 2]
    B, Q = len(context_lens), max(new_lens)
    k_cache = torch.randn(num_blocks, block_size, n_kv, hd, generator=gen)
    v_cache = torch.randn(num_blocks, block_size, n_kv, hd, generator=gen)
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    max_blocks = 4
    tables = torch.full((B, max_blocks), -1, dtype=torch.long)
    for b in range(B):
        need = math.ceil((context_lens[b] + new_lens[b]) / block_size)
        tables[b, :need] = torch.tensor([perm.pop() for _ in range(need)])
    q = torch.randn(B, Q, nh, hd, generator=gen)
    masks = torch.zeros(B, Q, Q, dtype=torch.bool)
    for b in range(B):
        n = new_lens[b]
        if tree:
            masks[b, :n, :n] = _random_tree_mask(gen, n)
        else:
            masks[b, :n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    scale = hd**-0.5
    out = paged_tree_attention(
        q,
        k_cache,
        v_cache,
        tables,
        torch.tensor(context_lens),
        torch.tensor(new_lens),
        masks if tree else None,
        scale,
    )
    assert out.shape == (B, Q, nh, hd)
    for b in range(B):
        ctx, n = context_lens[b], new_lens[b]
        slots = [
            int(tables[b, p // block_size]) * block_size + p % block_size for p in range(ctx + n)
        ]
        k_seq = k_cache.view(-1, n_kv, hd)[slots]
        v_seq = v_cache.view(-1, n_kv, hd)[slots]
        ref = _naive(q[b, :n], k_seq, v_seq, ctx, n, masks[b], scale)
        torch.testing.assert_close(out[b, :n], ref, atol=1e-5, rtol=1e-5)
        assert torch.all(out[b, n:] == 0)


def test_write_kv_and_copy_blocks():
    k_cache = torch.zeros(6, 4, 2, 3)
    v_cache = torch.zeros(6, 4, 2, 3)
    k = torch.randn(3, 2, 3)
    v = torch.randn(3, 2, 3)
    write_kv(k_cache, v_cache, k, v, torch.tensor([5, -1, 9]))
    assert torch.equal(k_cache[1, 1], k[0]) and torch.equal(v_cache[2, 1], v[2])
    assert int((k_cache != 0).any(-1).any(-1).sum()) == 2  # the padded token was skipped
    copy_blocks(k_cache, v_cache, torch.tensor([1, 2]), torch.tensor([4, 5]))
    assert torch.equal(k_cache[4], k_cache[1]) and torch.equal(v_cache[5], v_cache[2])
