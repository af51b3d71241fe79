"""Paged tree attention on CPU without most of its padding: the reference run per row group.

The reference attends every sequence of a step over the step's widest block table and its
longest query, so one long context or one prefill chunk makes the whole batch pay for it: a
256-token chunk beside 20 decodes pads every decode row to 256 queries. Here the rows are
sorted by query length, then key length, binned so that a bin's padded work stays within
``SLACK`` of each row's own, and the bins joined into the groups that cost least in padded
work plus a call's overhead each; each group runs the reference over its own longest query
and its own widest table. Same signature and results as
``kernels.paged_attention.paged_tree_attention``; imports nothing else from the project.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.paged_attention import paged_tree_attention as reference_attention

__all__ = ["attend_in_groups", "decode_attention", "padding", "paged_tree_attention", "row_groups"]

# A row joins a bin whose longest query x widest keys is at most 1.5x its own: the best of
# 1.2, 1.5 and 2 for decode batches of 16-64 lognormal contexts (benchmarks/attention_grouping.py).
SLACK = 1.5
# One call of the reference, in the products it computes (query-key pairs x heads x head_dim):
# ~0.25 ms on CPU, about what 2**18 products take there. A trade-off (docs/benchmarks.md):
# 2**20 keeps mid-size decode batches whole (a batch of 10 cut in two ran 11 % slower than
# whole) but then the calibrated twin ran 13-25 % short (it priced the context sum then; it
# now reads this rule from the profile, `KernelSet.one_call_products`, and prices the groups
# past it by the same overhead: they change together).
CALL_COST = 2**18


def row_groups(
    new_lens: list[int], key_lens: list[int], width: int, slack: float = SLACK
) -> list[list[int]]:
    """Rows cut into groups of like shape, largest first; ``width`` = heads x head_dim.

    Sorted by (query, keys), a row starts a new bin when the bin's shape would be over
    ``slack`` times its own or any member's; then runs of neighbouring bins become groups,
    the runs that cost least in padded products plus CALL_COST per group."""
    order = sorted(range(len(new_lens)), key=lambda b: (new_lens[b], key_lens[b]), reverse=True)
    bins: list[list[int]] = []
    most_q = most_k = least = 0  # the current bin's longest query, widest keys, least work
    for b in order:
        q, k = new_lens[b], key_lens[b]
        if bins and most_q * max(most_k, k) <= slack * min(least, q * k):
            bins[-1].append(b)
            most_k, least = max(most_k, k), min(least, q * k)
            continue
        bins.append([b])
        most_q, most_k, least = q, k, q * k
    return _cheapest_runs(bins, new_lens, key_lens, width)


def _cheapest_runs(
    bins: list[list[int]], new_lens: list[int], key_lens: list[int], width: int
) -> list[list[int]]:
    """Dynamic programming over the cuts between bins (a step has a few bins, not rows)."""
    shapes = [(max(new_lens[b] for b in r), max(key_lens[b] for b in r), len(r)) for r in bins]
    best = [0] + [-1] * len(bins)  # best[j]: least cost of bins[:j]
    start = [0] * (len(bins) + 1)  # where the last group of bins[:j] starts
    for j in range(1, len(bins) + 1):
        most_q = most_k = rows = 0
        for i in range(j - 1, -1, -1):  # the group bins[i:j]
            q, k, n = shapes[i]
            most_q, most_k, rows = max(most_q, q), max(most_k, k), rows + n
            cost = best[i] + CALL_COST + most_q * most_k * rows * width
            if best[j] < 0 or cost < best[j]:
                best[j], start[j] = cost, i
    groups: list[list[int]] = []
    j = len(bins)
    while j > 0:
        groups.insert(0, [b for r in bins[start[j] : j] for b in r])
        j = start[j]
    return groups


def paged_tree_attention(
    q: torch.Tensor,  # (B, Q, nh, hd) padded new queries
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    block_tables: torch.Tensor,  # (B, max_blocks) int
    context_lens: torch.Tensor,  # (B,) int cached tokens before this step
    new_lens: torch.Tensor,  # (B,) int new tokens this step (<= Q)
    tree_mask: torch.Tensor | None,  # (B, Q, Q) bool; None = causal
    scale: float,
) -> torch.Tensor:  # (B, Q, nh, hd), zeros on padded rows
    """The reference's attention, computed group by group (see the module docstring)."""
    nh, hd = q.shape[2:]
    news, keys = new_lens.tolist(), (context_lens + new_lens).tolist()
    if padding(news, keys) * nh * hd < CALL_COST:  # no cut could pay for its call
        groups = [list(range(len(news)))]
    else:
        groups = row_groups(news, keys, nh * hd)
    args = (q, k_cache, v_cache, block_tables, context_lens, new_lens, tree_mask, scale)
    return attend_in_groups(groups, *args, lens=(news, keys))


def padding(news: list[int], keys: list[int]) -> int:
    """Query-key pairs that padding every row to the longest query and keys adds: under
    CALL_COST / width the step runs in one call (the calibrated price's rule too)."""
    return max(news) * max(keys) * len(news) - sum(n * k for n, k in zip(news, keys, strict=True))


def decode_attention(
    q: torch.Tensor,  # (G, 1, nh, hd) one new token per row
    k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # (G, max_blocks)
    keys: list[int],  # each row's cached tokens and its new one, all visible to it
    scale: float,
) -> torch.Tensor:  # (G, 1, nh, hd)
    """The reference's result for rows of one new token each. Such a token sees its own key
    and every cached one (a tree of one token is itself), so the mask is just each row's
    length, and none for one row: a few ops where the reference builds a tree's. The query
    heads sharing a KV head are that head's queries (one call over n_kv heads of nh / n_kv
    queries, not nh heads of one query each): the CPU's SDPA kernel walks the keys once per
    query block, and runs 1.3x (one row) to 1.8x (3-7 rows) faster so."""
    G, widest = len(keys), max(keys)
    nh = q.shape[2]
    block_size, n_kv, hd = k_cache.shape[1:]
    tables = block_tables[:, : -(-widest // block_size)].to(device=q.device, dtype=torch.long)
    flat = tables.clamp(min=0).reshape(-1)  # (G * blocks,)
    k = k_cache.index_select(0, flat).view(G, -1, n_kv, hd)[:, :widest]  # (G, L, n_kv, hd)
    v = v_cache.index_select(0, flat).view(G, -1, n_kv, hd)[:, :widest]
    mask = None
    if G > 1:
        lengths = torch.tensor(keys, device=q.device)[:, None]  # (G, 1)
        mask = (torch.arange(widest, device=q.device) < lengths)[:, None, None]  # (G, 1, 1, L)
    # Query head h is query h % r of KV head h // r (r = nh / n_kv), as enable_gqa pairs them.
    out = F.scaled_dot_product_attention(
        q.reshape(G, n_kv, nh // n_kv, hd).float(),  # (G, n_kv, r, hd)
        k.transpose(1, 2).float(),  # (G, n_kv, L, hd)
        v.transpose(1, 2).float(),
        attn_mask=mask,
        scale=scale,
    )  # (G, n_kv, r, hd)
    return out.reshape(G, 1, nh, hd).to(q.dtype)


def attend_in_groups(
    groups: list[list[int]],
    q: torch.Tensor,  # (B, Q, nh, hd)
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # (B, max_blocks)
    context_lens: torch.Tensor,  # (B,)
    new_lens: torch.Tensor,  # (B,)
    tree_mask: torch.Tensor | None,  # (B, Q, Q)
    scale: float,
    lens: tuple[list[int], list[int]] | None = None,  # new_lens and keys, as host integers
) -> torch.Tensor:  # (B, Q, nh, hd)
    """The reference over each group of rows, at the group's own longest query and keys;
    `decode_attention` for a group of one-token rows. `lens`: new_lens and context_lens +
    new_lens as lists, when the caller has them (each `tolist` waits for a GPU)."""
    if lens is None:
        lens = new_lens.tolist(), (context_lens + new_lens).tolist()
    news, keys = lens
    if len(groups) == 1 and q.shape[1] == 1 and min(news) == 1:  # the whole step decodes
        return decode_attention(q, k_cache, v_cache, block_tables, keys, scale)
    if len(groups) == 1:  # the whole step: no gather of rows
        return reference_attention(
            q, k_cache, v_cache, block_tables, context_lens, new_lens, tree_mask, scale
        )
    block_size = k_cache.shape[1]
    out = q.new_zeros(q.shape)  # (B, Q, nh, hd), zeros on padded rows
    for group in groups:
        rows = torch.tensor(group)  # (G,) on the CPU: it indexes tensors on any device
        q_len, fewest = max(news[b] for b in group), min(news[b] for b in group)
        if q_len == 0:  # rows without new tokens stay zero
            continue
        if q_len == fewest == 1:
            group_keys = [keys[b] for b in group]
            out[rows, :1] = decode_attention(
                q[rows, :1], k_cache, v_cache, block_tables[rows], group_keys, scale
            )
            continue
        blocks = -(-max(keys[b] for b in group) // block_size)
        mask = None if tree_mask is None else tree_mask[rows, :q_len, :q_len]  # (G, Qg, Qg)
        out[rows, :q_len] = reference_attention(
            q[rows, :q_len],  # (G, Qg, nh, hd)
            k_cache,
            v_cache,
            block_tables[rows, :blocks],  # (G, blocks)
            context_lens[rows],
            new_lens[rows],
            mask,
            scale,
        )
    return out
