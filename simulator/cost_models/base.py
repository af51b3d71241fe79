"""The cost model interface: how long one engine step takes on one replica."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepWork:
    """What one engine step computes, in the terms cost models need.

    A prefill chunk of `c` tokens for a sequence whose KV already holds `p` tokens attends
    to `p + c` keys (causal inside the chunk). A decode token of a sequence whose KV then
    holds `k` tokens (itself included) attends to `k` keys.
    """

    prefill_chunk_tokens: tuple[int, ...] = ()  # per prefilling sequence: new tokens
    prefill_context_tokens: tuple[int, ...] = ()  # per prefilling sequence: KV before chunk
    decode_batch_size: int = 0  # sequences decoding one token each
    decode_context_sum: int = 0  # sum over decode sequences of KV length incl. the new token

    @property
    def num_tokens(self) -> int:
        return sum(self.prefill_chunk_tokens) + self.decode_batch_size


class CostModel(ABC):
    """Step durations for one replica (all its tensor-parallel GPUs together)."""

    @abstractmethod
    def step_time_s(self, work: StepWork) -> float:
        """Duration of one step."""

    @abstractmethod
    def decode_span_s(self, batch_size: int, context_sum: int, n_steps: int) -> np.ndarray:
        """Durations of `n_steps` consecutive decode-only steps of `batch_size` sequences.

        Step i (from 0) has `decode_context_sum = context_sum + i * batch_size`. Element i must
        equal `step_time_s(StepWork(decode_batch_size=batch_size,
        decode_context_sum=context_sum + i * batch_size))` bit for bit: the simulator's bulk
        stepping relies on it.
        """
