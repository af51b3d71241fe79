"""The lookahead decoder's step model (Jacobi iteration with an n-gram pool, no draft).

Every step the target computes, per sequence, the window's N−1 levels of W tokens (the last
emitted token among them) and G candidate n-grams of N−1 tokens (`step_tokens`), whatever
the sequence's room: `max_draft_tokens` beyond a vanilla step's one. A verified candidate
adds up to N−1 tokens to the step's own one; how many comes from `tokens_per_step` (a
histogram, index = tokens beyond the first) or a real run. As the real decoder does, the
records count the candidates' G(N−1) tokens as drafted (the simulator assumes a full pool).
Calibrated from a real run, a step feeds the window and the run's own mean candidate tokens
per sequence instead: the real pool holds fewer than G n-grams for many tokens (the `small`
model on Spec-Bench questions, W5 N4 G5: 10.2 candidate tokens per sequence and step where a
full pool feeds 15).
"""

from __future__ import annotations

import numpy as np

from simulator.decoders.acceptance import AcceptanceByPosition, AcceptanceDistribution
from simulator.decoders.step_model import StepModel
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import LookaheadDecoderConfig


def max_accepted_tokens(cfg: LookaheadDecoderConfig) -> int:
    """A verified n-gram adds at most N − 1 tokens to the step's first."""
    return cfg.ngram - 1


def lookahead_step_model(
    cfg: LookaheadDecoderConfig,
    calibrated: AcceptanceDistribution | None = None,
    candidate_tokens: float | None = None,
    by_position: AcceptanceByPosition | None = None,
) -> StepModel:
    """calibrated: a stored run's tokens per step beyond the first, replacing
    `tokens_per_step`; candidate_tokens: its mean candidate tokens per sequence and step
    (at most a full pool's G(N−1)), replacing a full pool's; by_position: its acceptance by
    output position, drawn instead of `calibrated` (which it pools)."""
    k = max_accepted_tokens(cfg)
    if calibrated is not None:
        acceptance = calibrated
    elif cfg.tokens_per_step is not None:
        acceptance = AcceptanceDistribution.histogram(cfg.tokens_per_step.counts, k)
    else:
        raise WorkbenchError(
            "the simulator needs the tokens a lookahead step adds: give tokens_per_step "
            "(a histogram) or calibrate_from (a real run)",
            field="decoder.tokens_per_step",
        )
    extra = np.full(k + 1, cfg.max_draft_tokens, dtype=np.int64)
    drafted = cfg.candidates * (cfg.ngram - 1)
    extra_mean, drafted_per_step = None, drafted
    if candidate_tokens is not None:  # each sequence's drawn candidates are its drafts
        extra_mean = cfg.window_tokens + min(candidate_tokens, float(drafted)) - 1.0
        drafted_per_step = None
    return StepModel(
        acceptance,
        extra,
        drafts_with_model=False,
        drafted_per_step=drafted_per_step,
        undrafted=cfg.window_tokens - 1,  # the window beyond the current token
        host_s=cfg.host_overhead_ms / 1e3,
        extra_mean=extra_mean,
        acceptance_by_position=by_position,
    )
