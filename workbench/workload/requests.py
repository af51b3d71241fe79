"""The request stream as columns: one entry per request, identical for every backend."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order. For closed-loop arrivals `arrival_s` is NaN: a client sends
    request i when its previous one ends (see `closed_loop_concurrency`)."""

    arrival_s: np.ndarray  # (n,) float64, non-decreasing (NaN for closed loop)
    prompt_tokens: np.ndarray  # (n,) int64, > 0
    output_tokens: np.ndarray  # (n,) int64, > 0: tokens the request generates
    closed_loop_concurrency: int | None = None
    think_time_s: float = 0.0
    # Real prompts (`workload.prompts`): each request's token ids, len == prompt_tokens[i];
    # None: the backends make synthetic ids of the drawn lengths.
    prompt_ids: list[list[int]] | None = None
    category: np.ndarray | None = None  # (n,) object: each prompt's category; None: synthetic
    # Length-aware scheduling: what an oracle length predictor sees (None: output_tokens),
    # and the predictions the scheduler uses (set by `length_predictors.with_predictions`).
    oracle_tokens: np.ndarray | None = None  # (n,) int64
    predicted_tokens: np.ndarray | None = None  # (n,) int64, >= 1

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @property
    def is_closed_loop(self) -> bool:
        return self.closed_loop_concurrency is not None
