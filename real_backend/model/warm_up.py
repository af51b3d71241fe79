"""Compile the Triton kernel variants a step can launch before a run starts.

Triton compiles a kernel variant on its first launch: 0.7-1.1 s each on an H100 host
(2026-11-25), during which the step that launched it stalls, and the run's queue grows behind
it. One variant compiled 1 s into a CUDA run at 30 req/s (a 1.1 s step) took that run's TTFT
p90 to 670 ms, where its simulated twin, without the stall, gave 35 ms. The variants are few
(per dtype and shape: the attention's query-tile height, a single pass or split-KV, a causal or
a tree mask; the verification walk's tile width, chain or tree; the copy-on-write block copy),
so throwaway steps on a scratch cache compile them all up front. Compiled kernels stay in
Triton's caches: a second warm-up of the same model, or one in a later process on the same
machine, only loads them.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch

from real_backend.model.transformer import SeqStep, Transformer

# Enough cached keys for the split heuristic to split a small grid: at least
# kernels.triton_attention.MIN_KEYS_TO_SPLIT (which needs Triton to import; a test checks it).
LONG_CONTEXT = 2048
QUERIES = (1, 2, 4, 8, 16, 32, 64, 128)  # new tokens per step: every tile height up to the cap
VERIFY_NODES = (2, 17, 33, 65)  # one per verification tile width (16, 32, 64, 128)

# What a warm-up compiled for: the block size and what else picks the variants.
WarmKey = tuple[int, torch.dtype, str, str]
_warmed: weakref.WeakKeyDictionary[Transformer, set[WarmKey]] = weakref.WeakKeyDictionary()


def warm_up(model: Transformer, block_size: int) -> None:
    """Launch every kernel variant once on a scratch cache (CUDA with the Triton kernels only;
    elsewhere nothing is compiled at run time). Once per model, block size, dtype, kernel
    choice and linear layers."""
    kernels = model.kernel_set()
    weight = model.embed_tokens.weight
    if weight.device.type != "cuda" or kernels.name != "triton":
        return
    key = (block_size, weight.dtype, model.kernel_choice, model.linear_impl)
    done = _warmed.setdefault(model, set())
    if key in done:
        return
    launch_variants(model, block_size)
    torch.cuda.synchronize()
    done.add(key)


def launch_variants(model: Transformer, block_size: int) -> None:
    """The warm-up's throwaway steps, on any device and kernel set (tests run it on CPU)."""
    blocks = -(-(LONG_CONTEXT + 2 * max(QUERIES)) // block_size) + 2  # + the CoW copy
    cache = model.new_cache(blocks, block_size)
    with torch.inference_mode():
        _attention_variants(model, cache)
        _verification_variants(model, cache, model.kernel_set().max_tree_nodes)
        _copy_on_write(model, cache)
    assert not cache.tables and cache.num_free_blocks == blocks, "the scratch cache leaked"


def _chain(n: int) -> list[int]:
    return [-1, *range(n - 1)]


def _fits(model: Transformer, tokens: int) -> bool:
    """Whether a sequence of `tokens` is allowed (a sliding-window model refuses longer ones:
    the engine never runs them, so their variants are never needed)."""
    window = model.args.sliding_window
    return window is None or tokens <= window


def _attention_variants(model: Transformer, cache) -> None:
    """Steps of each query count, causal and tree-masked, over no context (a single pass) and
    over a long one (split-KV where the grid is small): LONG_CONTEXT cached keys, or as many
    as a sliding window leaves beside the step's queries (a window of 1,600 still splits)."""
    _over_context(model, cache, "fresh", {n: 0 for n in QUERIES if _fits(model, n)})
    window = model.args.sliding_window
    long = {n: LONG_CONTEXT if window is None else min(LONG_CONTEXT, window - n) for n in QUERIES}
    _over_context(model, cache, "context", {n: c for n, c in long.items() if c > 0})


def _over_context(model: Transformer, cache, seq: str, contexts: dict[int, int]) -> None:
    """Each query count n stepped over `contexts[n]` cached keys, causal and as a chain: the
    longest context is prefilled once and cut back for each step (contexts shrink as n grows)."""
    if not contexts:
        return
    longest = max(contexts.values())
    if longest:
        model.step(cache, [SeqStep(seq, [0] * longest)], last_only=True)
    for n, context in sorted(contexts.items()):
        for parents in (None, _chain(n)):
            if context:
                cache.truncate(seq, context)
            model.step(cache, [SeqStep(seq, [0] * n, parents)], last_only=True)
            if not context:
                cache.free(seq)
    if longest:
        cache.free(seq)


def _verification_variants(model: Transformer, cache, max_nodes: int | None) -> None:
    """Greedy verification of chains and trees of each tile width the kernel takes."""
    verify = model.kernel_set().greedy_verify
    for n in _nodes_up_to(VERIFY_NODES, max_nodes):
        if not _fits(model, n):
            continue
        (logits,) = model.step(cache, [SeqStep("verify", [0] * n)])  # (n, V)
        cache.free("verify")
        draft = torch.zeros(1, n - 1, dtype=torch.long, device=logits.device)
        lens = torch.tensor([n - 1], device=logits.device)
        parents = torch.tensor([[0, *range(n - 1)]], device=logits.device)  # (1, n): a chain
        for tree in (None, parents):
            verify(logits[None], draft, lens, tree)


def _copy_on_write(model: Transformer, cache) -> None:
    """A fork whose child appends to the shared, partly filled last block (APAR's branches)."""
    if not _fits(model, cache.block_size + 2):
        return
    model.step(cache, [SeqStep("parent", [0] * (cache.block_size + 1))], last_only=True)
    cache.fork("parent", "child")
    model.step(cache, [SeqStep("child", [0])], last_only=True)
    cache.free("child")
    cache.free("parent")


def _nodes_up_to(nodes: Sequence[int], limit: int | None) -> list[int]:
    return [n for n in nodes if limit is None or n <= limit]
