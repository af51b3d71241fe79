"""A deterministic linear cost model for engine-mechanics tests."""

from __future__ import annotations

import numpy as np

from simulator.cost_models.base import CostModel, StepWork


class LinearCost(CostModel):
    """duration = base + per_token × tokens + per_context × attended keys."""

    def __init__(
        self, base_s: float = 0.01, per_token_s: float = 1e-4, per_context_s: float = 1e-7
    ):
        self.base_s = base_s
        self.per_token_s = per_token_s
        self.per_context_s = per_context_s

    def _decode(self, batch_size: int, context_sums: np.ndarray) -> np.ndarray:
        return self.base_s + self.per_token_s * batch_size + self.per_context_s * context_sums

    def step_time_s(self, work: StepWork) -> float:
        if not work.prefill_chunk_tokens:
            return float(
                self._decode(work.decode_batch_size, np.array([work.decode_context_sum]))[0]
            )
        keys = sum(
            c * (p + c)
            for c, p in zip(work.prefill_chunk_tokens, work.prefill_context_tokens, strict=True)
        )
        return (
            self.base_s
            + self.per_token_s * work.num_tokens
            + self.per_context_s * (keys + work.decode_context_sum)
        )

    def decode_span_s(
        self, batch_size: int, context_sum: int, n_steps: int, context_max: int = 0
    ) -> np.ndarray:
        sums = context_sum + batch_size * np.arange(n_steps)  # (n_steps,)
        return self._decode(batch_size, sums.astype(np.float64))
