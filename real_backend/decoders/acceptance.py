"""Acceptance rules: greedy over one chain (lookahead's candidates), batched greedy
verification of drafts (chains and trees, through the `greedy_verify` kernel of
`kernels/verification.py`), and rejection sampling for speculative sampling."""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from kernels.dispatch import KernelSet
from real_backend.host_to_device import to_device


def accept_greedy_chain(target_argmax: list[int], drafted: list[int]) -> int:
    """Accepted drafted tokens. `target_argmax[i]` is the target's choice after the root and
    drafted[:i]; keep d_i while it is exactly what greedy decoding would have emitted."""
    accepted = 0
    for choice, token in zip(target_argmax, drafted, strict=False):
        if choice != token:
            break
        accepted += 1
    return accepted


def greedy_decisions(
    kernels: KernelSet,
    drafts: list[list[int]],  # per sequence, its drafted tokens (nodes 1..n)
    logits: list[torch.Tensor],  # each (1 + n_b, V): after the root and each drafted node
    parents: torch.Tensor | None,  # (B, T) each node's parent node; None: chains
) -> list[tuple[list[int], int]]:
    """Per sequence (accepted node indices, the target's next token), for the whole batch in
    one verification kernel: a drafted token is accepted while it is the target's argmax
    after its parent, i.e. what greedy decoding would emit there."""
    padded = pad_sequence(logits, batch_first=True)  # (B, T, V)
    B, T = padded.shape[:2]
    tokens = torch.zeros(B, T - 1, dtype=torch.long)  # (B, T-1) drafted tokens
    for b, drafted in enumerate(drafts):
        tokens[b, : len(drafted)] = torch.tensor(drafted, dtype=torch.long)
    lens = torch.tensor([len(drafted) for drafted in drafts])  # (B,)
    device = padded.device
    _, bonus, path = kernels.greedy_verify(
        padded,
        to_device(tokens, device),
        to_device(lens, device),
        None if parents is None else to_device(parents, device),
    )
    return [
        ([j - 1 for j in nodes[1:] if j > 0], token)
        for nodes, token in zip(path.tolist(), bonus.tolist(), strict=True)
    ]


def accept_rejection_sampling(
    p: torch.Tensor,  # (k+1, V) target distributions after the root and each drafted token
    q: torch.Tensor,  # (k, V) draft distributions each drafted token was sampled from
    drafted: list[int],
    generator: torch.Generator,
) -> tuple[int, int]:
    """(accepted drafted tokens, next token), distributed exactly as sampling the target.

    Accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection draw from
    the residual max(p_i − q_i, 0) renormalised; if all k pass, draw the bonus from p_k.
    """
    for i, token in enumerate(drafted):
        ratio = p[i, token] / q[i, token].clamp_min(1e-30)
        if torch.rand((), generator=generator) < ratio:
            continue
        residual = (p[i] - q[i]).clamp_min(0)  # (V,)
        if float(residual.sum()) <= 0:  # p == q: a rejection has probability zero
            residual = p[i]
        return i, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
    return len(drafted), int(torch.multinomial(p[len(drafted)], 1, generator=generator))
