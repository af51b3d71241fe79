"""Triton greedy verification: argmaxes and the accepted-path walk, all on the device.

Same contract and signature as ``kernels.verification.greedy_verify`` (the reference). Import
this module lazily (see ``kernels.triton_runtime``).

Two launches and no host round trip: one program per scored row takes the argmax over the
vocabulary; then one program per sequence decides acceptance for the whole tree at once. The
walk program builds the ancestor-or-self matrix ``C[j, k]`` ("k is on node j's root path") by
squaring ``I + parent`` log2(T) times (a tile matmul), so "node and all its ancestors match" is a
row reduction and each node's deepest accepted descendant a column reduction; only the final
descent from the root, one step per accepted token, is a loop. A chain needs none of that: its
path ends before the first mismatch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.triton_runtime import KernelCall, check_launchable, launch_all, next_power_of_2

__all__ = ["greedy_verify", "plan_greedy_verify"]

VOCAB_CHUNK = 1024
# The walk holds a (T, T) fp16 ancestor matrix in one program: at 256 nodes its matmul needs
# 256 KiB of shared memory (sm_90 allows 227) and ptxas fails; 128 compiles without spills.
MAX_TREE_NODES = 128


@triton.jit
def _argmax_kernel(logits_ptr, argmax_ptr, vocab, stride_row, CHUNK: tl.constexpr):
    """argmax over one row of logits, the first maximum on ties."""
    row = tl.program_id(0).to(tl.int64)
    best = tl.full([], float("-inf"), tl.float32)
    best_id = tl.full([], 0, tl.int64)
    for start in range(0, vocab, CHUNK):
        ids = start + tl.arange(0, CHUNK)
        x = tl.load(logits_ptr + row * stride_row + ids, mask=ids < vocab, other=float("-inf"))
        x_max, x_arg = tl.max(
            x.to(tl.float32), 0, return_indices=True, return_indices_tie_break_left=True
        )
        better = x_max > best  # strict: an earlier chunk keeps a tie
        best_id = tl.where(better, start + x_arg.to(tl.int64), best_id)
        best = tl.where(better, x_max, best)
    tl.store(argmax_ptr + row, best_id)


@triton.jit
def _ancestor_closure(parent, node, LOG2_T: tl.constexpr):
    """(T, T) fp16 0/1: [j, k] = node k is node j or one of its ancestors."""
    closure = ((parent[:, None] == node[None, :]) | (node[:, None] == node[None, :])).to(tl.float16)
    for _ in tl.static_range(LOG2_T):  # covers ancestors up to 2**LOG2_T steps up
        closure = (tl.dot(closure, closure) > 0).to(tl.float16)
    return closure


@triton.jit
def _chain_path(mismatch, node, BLOCK_T: tl.constexpr):
    """Chain: accept up to the first mismatching node."""
    best = tl.min(tl.where(mismatch, node, BLOCK_T), 0) - 1
    return best, tl.where(node <= best, node, -1), best


@triton.jit
def _tree_path(mismatch, parent, node, BLOCK_T: tl.constexpr, LOG2_T: tl.constexpr):
    """Tree: (depth of the deepest accepted node, the path to it by depth, its last node)."""
    closure = _ancestor_closure(parent, node, LOG2_T)  # (BLOCK_T, BLOCK_T)
    accepted = tl.sum(closure * mismatch[None, :].to(tl.float16), 1) == 0  # (BLOCK_T,)
    depth = tl.sum(closure.to(tl.int32), 1) - 1
    on_path = (closure > 0) & accepted[:, None]
    height = tl.max(tl.where(on_path, depth[:, None], -1), 0)  # deepest accepted below each node
    best = tl.max(height, 0)
    leads_to_best = accepted & (height == best)
    path = tl.where(node == 0, 0, -1)  # (BLOCK_T,) node at each depth, root first
    cur = tl.full([], 0, tl.int32)
    for d in range(1, best + 1):  # descend: the lowest-indexed child still leading to `best`
        cur = tl.min(tl.where(leads_to_best & (parent == cur), node, BLOCK_T), 0)
        path = tl.where(node == d, cur, path)
    return best, path, cur


@triton.jit(do_not_specialize=["n_nodes", "stride_draft", "stride_parents"])  # vary by step
def _verify_walk_kernel(
    argmax_ptr, draft_ptr, draft_lens_ptr, parents_ptr,
    accepted_len_ptr, bonus_ptr, path_ptr,
    n_nodes, stride_draft, stride_parents,
    IS_CHAIN: tl.constexpr, BLOCK_T: tl.constexpr, LOG2_T: tl.constexpr,
):  # fmt: skip
    """One sequence: which nodes match, the deepest accepted path, its bonus token."""
    b = tl.program_id(0).to(tl.int64)
    node = tl.arange(0, BLOCK_T)
    live = (node >= 1) & (node <= tl.load(draft_lens_ptr + b)) & (node < n_nodes)
    if IS_CHAIN:
        parent = tl.where(live, node - 1, -1)
    else:
        parent = tl.load(parents_ptr + b * stride_parents + node, mask=live, other=-1)
    predicted = tl.load(argmax_ptr + b * n_nodes + parent, mask=live & (parent >= 0), other=-1)
    token = tl.load(draft_ptr + b * stride_draft + node - 1, mask=live, other=-2)
    mismatch = (node > 0) & ~(live & (token == predicted))  # padding never matches
    if IS_CHAIN:
        best, path, last = _chain_path(mismatch, node, BLOCK_T)
    else:
        best, path, last = _tree_path(mismatch, parent, node, BLOCK_T, LOG2_T)
    tl.store(path_ptr + b * n_nodes + node, path.to(tl.int64), mask=node < n_nodes)
    own_argmax = tl.load(argmax_ptr + b * n_nodes + node, mask=node < n_nodes, other=0)
    tl.store(accepted_len_ptr + b, best.to(tl.int64))
    tl.store(bonus_ptr + b, tl.sum(tl.where(node == last, own_argmax, 0), 0))


def _check_inputs(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_lens: torch.Tensor,
    parents: torch.Tensor | None,
) -> None:
    B, T, _ = logits.shape
    if draft_tokens.shape != (B, T - 1) or draft_lens.shape != (B,):
        raise ValueError(
            f"draft_tokens must be ({B}, {T - 1}) and draft_lens ({B},), got "
            f"{tuple(draft_tokens.shape)}, {tuple(draft_lens.shape)}"
        )
    if parents is not None and parents.shape != (B, T):
        raise ValueError(f"parents must be ({B}, {T}), got {tuple(parents.shape)}")
    if parents is not None and T > MAX_TREE_NODES:
        raise ValueError(f"trees of at most {MAX_TREE_NODES} nodes, got {T}")


def greedy_verify(
    logits: torch.Tensor,  # (B, T, V) target logits after each node
    draft_tokens: torch.Tensor,  # (B, T - 1) int64, node j >= 1 carries draft_tokens[:, j - 1]
    draft_lens: torch.Tensor,  # (B,) int64 drafted nodes in use per sequence (<= T - 1)
    parents: torch.Tensor | None = None,  # (B, T) int64 parent node of each node; None = chain
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # (B,), (B,), (B, T) int64
    """Accepted length, bonus token and accepted path (see ``kernels.verification``)."""
    check_launchable(logits, draft_tokens, draft_lens)
    calls, outputs = plan_greedy_verify(logits, draft_tokens, draft_lens, parents)
    launch_all(calls)
    return outputs


def plan_greedy_verify(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_lens: torch.Tensor,
    parents: torch.Tensor | None = None,
) -> tuple[list[KernelCall], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The launches of ``greedy_verify`` and the outputs they fill, arguments checked."""
    _check_inputs(logits, draft_tokens, draft_lens, parents)
    B, T, V = logits.shape
    device = logits.device
    accepted_len = torch.empty(B, dtype=torch.int64, device=device)
    bonus = torch.empty(B, dtype=torch.int64, device=device)
    path = torch.empty((B, T), dtype=torch.int64, device=device)
    outputs = (accepted_len, bonus, path)
    if B == 0:
        return [], outputs
    rows = logits.reshape(B * T, V)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    argmax = torch.empty(B * T, dtype=torch.int64, device=device)
    argmax_call = KernelCall(
        _argmax_kernel, (B * T,), (rows, argmax, V, rows.stride(0)), dict(CHUNK=VOCAB_CHUNK)
    )
    draft = draft_tokens.to(device=device, dtype=torch.int64).contiguous()
    tree = None if parents is None else parents.to(device=device, dtype=torch.int64).contiguous()
    block_t = max(16, next_power_of_2(T))  # the closure matmul needs 16-wide tiles
    lens = draft_lens.to(device=device, dtype=torch.int64)
    walk_args = (
        argmax, draft, lens, argmax if tree is None else tree,  # no parents for a chain
        accepted_len, bonus, path,
        T, draft.stride(0), T,
    )  # fmt: skip
    walk_kwargs = dict(
        IS_CHAIN=tree is None, BLOCK_T=block_t, LOG2_T=block_t.bit_length() - 1,
        num_warps=8 if block_t >= 128 else 4,  # 4 warps spill the 128 x 128 closure on sm_80
    )  # fmt: skip
    walk_call = KernelCall(_verify_walk_kernel, (B,), walk_args, walk_kwargs)
    return [argmax_call, walk_call], outputs
