"""The lookahead decoder's step model (Jacobi iteration with an n-gram pool, no draft).

Every step the target computes, per sequence, its last token plus the window's N−1 levels
of W tokens and G candidate n-grams of N−1 tokens (`step_tokens`), whatever the sequence's
room; a verified candidate adds up to N−1 tokens to the step's own one. How many it adds
comes from `tokens_per_step` (a histogram, index = tokens beyond the first) or a real run.
"""

from __future__ import annotations

import numpy as np

from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.decoders.step_model import StepModel
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import LookaheadDecoderConfig


def max_accepted_tokens(cfg: LookaheadDecoderConfig) -> int:
    """A verified n-gram adds at most N − 1 tokens to the step's first."""
    return cfg.ngram - 1


def lookahead_step_model(
    cfg: LookaheadDecoderConfig, calibrated_counts: np.ndarray | None = None
) -> StepModel:
    k = max_accepted_tokens(cfg)
    if calibrated_counts is not None:
        counts = calibrated_counts
    elif cfg.tokens_per_step is not None:
        counts = np.asarray(cfg.tokens_per_step.counts)
    else:
        raise WorkbenchError(
            "the simulator needs the tokens a lookahead step adds: give tokens_per_step "
            "(a histogram) or calibrate_from (a real run)",
            field="decoder.tokens_per_step",
        )
    acceptance = AcceptanceDistribution.histogram(counts, k)
    extra = np.full(k + 1, cfg.step_tokens, dtype=np.int64)
    return StepModel(acceptance, extra, drafts_with_model=False)
