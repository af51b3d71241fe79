"""The speculative decoder's step model: a draft proposes, the target verifies.

Per step and sequence the target verifies its last token plus the drafted tokens (a chain
of k, or a token tree) and emits the accepted ones plus its own next token. A chain drafts
k = `num_speculative_tokens` tokens, or with `adaptive` what the real decoder's rule gives
each sequence (the stepper applies it; the acceptance below is a full k-draft's, capped at
what was drafted, which is exact for a chain). Trees accept a root-to-node path: at most
their depth.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.decoders.acceptance import AcceptanceDistribution, AcceptanceMixture
from simulator.decoders.step_model import StepModel
from workbench.scenario.decoders import (
    SpeculativeDecoderConfig,
)


def draft_shape(cfg: SpeculativeDecoderConfig) -> np.ndarray:
    """Drafted tokens by the depth the draft may reach: (depth + 1,), entry 0 is 0."""
    tree = cfg.tree
    if tree is None:
        return np.arange(cfg.num_speculative_tokens + 1, dtype=np.int64)
    if tree.kind == "static":
        per_level = np.cumprod(tree.branching)  # nodes at each depth
        return np.concatenate(([0], np.cumsum(per_level))).astype(np.int64)
    # Dynamic: each level keeps the top_k likeliest children, up to max_nodes in all.
    depth = min(tree.max_depth, math.ceil(tree.max_nodes / tree.top_k))
    return np.minimum(tree.top_k * np.arange(depth + 1), tree.max_nodes).astype(np.int64)


def max_accepted_tokens(cfg: SpeculativeDecoderConfig) -> int:
    """Most drafted tokens one step can accept: k, or the tree's depth."""
    return len(draft_shape(cfg)) - 1


def speculative_step_model(
    cfg: SpeculativeDecoderConfig,
    calibrated: AcceptanceDistribution | None = None,
    types: AcceptanceMixture | None = None,
) -> StepModel:
    """calibrated: a stored run's accepted tokens per step (a full draft), replacing
    `acceptance`; types: a chain draft run's request types, drawn per sequence instead."""
    shape = draft_shape(cfg)
    k = len(shape) - 1
    acceptance = calibrated
    if acceptance is None:
        acceptance = AcceptanceDistribution.from_config(cfg.acceptance, k)
    return StepModel(
        acceptance,
        shape,
        drafts_with_model=True,
        tree=cfg.tree is not None,
        host_s=cfg.host_overhead_ms / 1e3,
        acceptance_types=types,
    )
