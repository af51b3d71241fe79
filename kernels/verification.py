"""Greedy verification of drafted tokens, chain or tree: the PyTorch reference.

The Triton kernel in ``kernels.triton_verification`` implements the same contract with the same
signature. This module imports nothing from the project but the greedy choice
(``kernels.greedy``).

Contract of ``greedy_verify(logits, draft_tokens, draft_lens, parents)``:

* The step scored ``T`` positions per sequence (padded): node 0 is the root, the last accepted
  token; node ``j >= 1`` is the drafted token ``draft_tokens[b, j - 1]``. ``logits[b, j]`` are
  the target model's logits *after* node ``j`` (they predict its children). Sequence ``b`` uses
  nodes ``0 .. draft_lens[b]``; later nodes are padding and never accepted.
* ``parents[b, j]`` is node ``j``'s parent, in ``[0, j)`` for ``1 <= j <= draft_lens[b]``
  (other entries are ignored). ``None`` means a chain: the parent of node ``j`` is ``j - 1``.
* Node ``j`` *matches* when its token equals the argmax of its parent's logits (ties within a
  row of logits: the lowest token id). A node is *accepted* when it and all its ancestors
  (the root excepted) match. The accepted path is the root-to-node path to the deepest accepted
  node; among equally deep ones, the path that at its first difference takes the
  lower-indexed sibling (the lexicographically smallest list of node indices).
* Returns ``accepted_len`` ``(B,)``: accepted drafted tokens (the path's depth), ``bonus_token``
  ``(B,)``: the argmax of the logits after the path's last node, and ``accepted_path``
  ``(B, T)``: the path's node indices, root first (``accepted_path[b, 0] == 0``), padded with -1
  after ``accepted_len[b] + 1`` entries. All int64, on the logits' device.

For a chain this is the usual rule: accept the longest prefix of drafts that each equal the
argmax at the position before them; the bonus token is the argmax after the last accepted one.
"""

from __future__ import annotations

import torch

from kernels.greedy import greedy_tokens

__all__ = ["chain_parents", "greedy_verify"]


def chain_parents(batch: int, n_nodes: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(B, T) int64 parents of a chain: node j hangs off node j - 1 (the root's entry is -1)."""
    return (torch.arange(n_nodes, device=device) - 1).expand(batch, n_nodes)


def _accepted_nodes(argmax: list[int], drafts: list[int], parents: list[int], n: int) -> list[bool]:
    """Per node of one sequence: it and all its ancestors match (nodes 0..n; parents first)."""
    accepted = [True] + [False] * (len(argmax) - 1)
    for j in range(1, n + 1):
        parent = parents[j]
        if not 0 <= parent < j:
            raise ValueError(f"parent of node {j} must be in [0, {j}), got {parent}")
        accepted[j] = accepted[parent] and drafts[j - 1] == argmax[parent]
    return accepted


def _deepest_path(accepted: list[bool], parents: list[int], n: int) -> list[int]:
    """Root-to-node path to the deepest accepted node, lowest-indexed sibling on ties."""
    depth = [0] * (n + 1)
    for j in range(1, n + 1):
        depth[j] = depth[parents[j]] + 1
    height = [depth[j] if accepted[j] else -1 for j in range(n + 1)]  # deepest accepted below
    for j in range(n, 0, -1):  # children come after their parents: visit subtrees first
        height[parents[j]] = max(height[parents[j]], height[j])
    path = [0]
    while True:  # at each node, the lowest-indexed child that still leads to the deepest node
        below = [c for c in range(1, n + 1) if parents[c] == path[-1] and height[c] == height[0]]
        if not below:
            return path
        path.append(below[0])


def greedy_verify(
    logits: torch.Tensor,  # (B, T, V) target logits after each node
    draft_tokens: torch.Tensor,  # (B, T - 1) int64, node j >= 1 carries draft_tokens[:, j - 1]
    draft_lens: torch.Tensor,  # (B,) int64 drafted nodes in use per sequence (<= T - 1)
    parents: torch.Tensor | None = None,  # (B, T) int64 parent node of each node; None = chain
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # (B,), (B,), (B, T) int64
    """Accepted length, bonus token and accepted path of greedy verification (see module)."""
    B, T, _ = logits.shape
    if draft_tokens.shape != (B, T - 1):  # the Triton kernel's contract, checked alike here
        raise ValueError(f"draft_tokens must be ({B}, {T - 1}), got {tuple(draft_tokens.shape)}")
    argmax = greedy_tokens(logits)  # (B, T), first maximum on ties
    if parents is None:
        return _verify_chains(argmax, draft_tokens, draft_lens)
    return _verify_trees(argmax, draft_tokens, draft_lens, parents)


def _checked_lens(draft_lens: torch.Tensor, T: int) -> torch.Tensor:
    """(B,) int64 on the host, each in [0, T - 1]."""
    lens = draft_lens.to("cpu", torch.long)
    bad = ((lens < 0) | (lens > T - 1)).nonzero()
    if len(bad):
        b = int(bad[0, 0])
        raise ValueError(f"draft_lens[{b}] must be in [0, {T - 1}], got {int(lens[b])}")
    return lens


def _verify_chains(
    argmax: torch.Tensor,  # (B, T)
    draft_tokens: torch.Tensor,  # (B, T - 1)
    draft_lens: torch.Tensor,  # (B,)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chain rule for the whole batch at once: the matching prefix's length, the argmax
    after it, and the path 0..n (a chain's accepted nodes are a prefix)."""
    B, T = argmax.shape
    lens = _checked_lens(draft_lens, T).to(argmax.device)
    in_draft = torch.arange(T - 1, device=argmax.device) < lens[:, None]  # (B, T-1)
    matches = (draft_tokens == argmax[:, :-1]) & in_draft  # (B, T-1)
    accepted_len = matches.long().cumprod(-1).sum(-1)  # (B,) length of the matching prefix
    bonus = argmax.gather(1, accepted_len[:, None])[:, 0]  # (B,)
    nodes = torch.arange(T, device=argmax.device).expand(B, T)  # (B, T)
    path = torch.where(nodes <= accepted_len[:, None], nodes, -1)
    return accepted_len, bonus, path


def _verify_trees(
    argmax: torch.Tensor,  # (B, T)
    draft_tokens: torch.Tensor,  # (B, T - 1)
    draft_lens: torch.Tensor,  # (B,)
    parents: torch.Tensor,  # (B, T)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tree rule, sequence by sequence on the host."""
    B, T = argmax.shape
    device = argmax.device
    accepted_len = torch.zeros(B, dtype=torch.long)
    bonus = torch.zeros(B, dtype=torch.long)
    path = torch.full((B, T), -1, dtype=torch.long)
    lens = _checked_lens(draft_lens, T)
    for b in range(B):
        n = int(lens[b])
        row_argmax, row_parents = argmax[b].tolist(), parents[b].tolist()
        accepted = _accepted_nodes(row_argmax, draft_tokens[b].tolist(), row_parents, n)
        nodes = _deepest_path(accepted, row_parents, n)
        accepted_len[b] = len(nodes) - 1
        bonus[b] = row_argmax[nodes[-1]]
        path[b, : len(nodes)] = torch.tensor(nodes)
    return accepted_len.to(device), bonus.to(device), path.to(device)
