"""The lookahead decoder's step model (Jacobi iteration with an n-gram pool, no draft).

Every step the target computes, per sequence, the window's N−1 levels of W tokens (the last
emitted token among them) and G candidate n-grams of N−1 tokens (`step_tokens`), whatever
the sequence's room: `max_draft_tokens` beyond a vanilla step's one. A verified candidate
adds up to N−1 tokens to the step's own one; how many comes from `tokens_per_step` (a
histogram, index = tokens beyond the first) or a real run. As the real decoder does, the
records count the candidates' G(N−1) tokens as drafted (the simulator assumes a full pool).
Calibrated from a real run, a step feeds the window and the run's own candidate n-grams for
each sequence's output position instead (`lookahead_candidates`): the real pool holds fewer
than G n-grams for many tokens, and fewer early in an output than late (the `small` model on
Spec-Bench questions, W5 N4 G5: 0.3 n-grams per sequence and step over its first 4 tokens,
3.8 from 16, 4.4-4.7 from 32 on, where a full pool feeds 5).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simulator.decoders.acceptance import AcceptanceByPosition, AcceptanceDistribution
from simulator.decoders.lookahead_candidates import CandidatesByPosition
from simulator.decoders.step_model import StepModel
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import LookaheadDecoderConfig


def max_accepted_tokens(cfg: LookaheadDecoderConfig) -> int:
    """A verified n-gram adds at most N − 1 tokens to the step's first."""
    return cfg.ngram - 1


def lookahead_step_model(
    cfg: LookaheadDecoderConfig,
    calibrated: AcceptanceDistribution | None = None,
    candidates: CandidatesByPosition | None = None,
    by_position: AcceptanceByPosition | None = None,
) -> StepModel:
    """calibrated: a stored run's tokens per step beyond the first, replacing
    `tokens_per_step`; candidates: its candidate n-grams by output position (at most a full
    pool's G each), replacing a full pool's; by_position: its acceptance by output position,
    drawn instead of `calibrated` (which it pools)."""
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
    drafted_per_step: int | None = cfg.candidates * (cfg.ngram - 1)
    if candidates is not None:  # each sequence's drawn candidates are its drafts
        ngrams = np.minimum(candidates.ngrams, float(cfg.candidates))
        candidates = dataclasses.replace(candidates, ngrams=ngrams)
        drafted_per_step = None
    return StepModel(
        acceptance,
        extra,
        drafts_with_model=False,
        drafted_per_step=drafted_per_step,
        undrafted=cfg.window_tokens - 1,  # the window beyond the current token
        host_s=cfg.host_overhead_ms / 1e3,
        candidates=candidates,
        acceptance_by_position=by_position,
    )
