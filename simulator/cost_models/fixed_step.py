"""Memory-bound idealisation: every step streams the weights once and nothing else counts.

In that regime a step's time does not depend on its batch size, context or prefill, so
throughput is proportional to the tokens computed per step, and a schedule is judged by
its number of steps alone: the regime the sequence-scheduling paper reasons in. The
roofline model is the batch-dependent counterpart.
"""

from __future__ import annotations

import numpy as np

from simulator.cost_models.base import CostModel, StepWork


class FixedStepCostModel(CostModel):
    def __init__(self, step_ms: float) -> None:
        self.step_s = step_ms / 1000.0

    def step_time_s(self, work: StepWork) -> float:
        return self.step_s

    def decode_span_s(
        self, batch_size: int, context_sum: int, n_steps: int, context_max: int = 0
    ) -> np.ndarray:
        return np.full(n_steps, self.step_s)
