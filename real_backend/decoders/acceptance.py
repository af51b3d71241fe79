"""Acceptance rules: greedy over one chain (lookahead's candidates), and rejection sampling
for speculative sampling. Batched greedy verification of drafts (chains and trees) is the
`greedy_verify` kernel (`kernels/verification.py`)."""

from __future__ import annotations

import torch


def accept_greedy_chain(target_argmax: list[int], drafted: list[int]) -> int:
    """Accepted drafted tokens. `target_argmax[i]` is the target's choice after the root and
    drafted[:i]; keep d_i while it is exactly what greedy decoding would have emitted."""
    accepted = 0
    for choice, token in zip(target_argmax, drafted, strict=False):
        if choice != token:
            break
        accepted += 1
    return accepted


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
