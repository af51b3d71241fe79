"""The cost model interface: how long one engine step takes on one replica."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from workbench.scheduling.plan import PrefillChunk, StepPlan, chunk_rows, forward_split


@dataclass(frozen=True)
class StepWork:
    """What one engine step computes, in the terms cost models need.

    A prefill chunk of `c` tokens for a sequence whose KV already holds `p` tokens attends
    to `p + c` keys (causal inside the chunk). A decode token of a sequence whose KV then
    holds `k` tokens (itself included) attends to `k` keys. An engine whose decode attention
    pads every sequence to the batch's longest KV (the real backend's reference kernel on
    CPU) reads `decode_batch_size × decode_context_max` keys instead (`padded_decode_keys`).

    A multi-token decoder (speculative verification, lookahead) computes more tokens per
    decoding sequence: `decode_extra_tokens` beyond the one each, every one attending to the
    KV before it plus the step's earlier tokens of its sequence (a chain), summed in
    `decode_extra_context_sum`. Both are 0 for vanilla decoding, which keeps its own path.

    APAR's forks: the first `fork_chunks` prefill chunks are forks' (a branch's fork and
    child tokens over its parent's prefix) that the real engine computes in its decode
    forward, as rows beside the decodes' (`workbench.scheduling.plan.forward_split`;
    `in_decode_forward` gives the step as it ran them, `decode_forks` counting them); a cost
    model of other kernels may price them as chunks.
    """

    prefill_chunk_tokens: tuple[int, ...] = ()  # per prefilling sequence: new tokens
    prefill_context_tokens: tuple[int, ...] = ()  # per prefilling sequence: KV before chunk
    decode_batch_size: int = 0  # sequences decoding one token each
    decode_context_sum: int = 0  # sum over decode sequences of KV length incl. the new token
    decode_context_max: int = 0  # the longest of those lengths (0: not known, taken as equal)
    decode_extra_tokens: int = 0  # Σ tokens decodes compute beyond their one (drafts, window)
    decode_extra_context_sum: int = 0  # Σ over those tokens of the keys each attends to
    fork_chunks: int = 0  # the first prefill chunks that are APAR forks' (see above)
    decode_forks: int = 0  # forks' chunks already counted in decode_extra_* (folded)

    @classmethod
    def of_plan(
        cls,
        plan: StepPlan,
        split: tuple[list[PrefillChunk], list[PrefillChunk]] | None = None,
        extra_tokens: int = 0,
        extra_context_sum: int = 0,
    ) -> StepWork:
        """A plan's work, APAR forks' chunks first (`split`: its `forward_split`, when the
        caller has it already), with `extra_tokens` beyond one per decode."""
        forks, others = forward_split(plan) if split is None else split
        chunks = forks + others
        return cls(
            prefill_chunk_tokens=tuple(c.tokens for c in chunks),
            prefill_context_tokens=tuple(c.context_tokens for c in chunks),
            decode_batch_size=plan.decode_batch_size,
            decode_context_sum=plan.decode_context_sum,
            decode_context_max=plan.decode_context_max,
            decode_extra_tokens=extra_tokens,
            decode_extra_context_sum=extra_context_sum,
            fork_chunks=len(forks),
        )

    @property
    def num_tokens(self) -> int:
        return sum(self.prefill_chunk_tokens) + self.decode_batch_size + self.decode_extra_tokens

    def in_decode_forward(self) -> StepWork:
        """The step as the real engine runs it: forks' chunks as extra rows of the decode
        forward (tokens and keys added to `decode_extra_*`), only the other chunks as
        prefill. Without decodes there are none (`forward_split`): the step is its chunks'."""
        if not self.fork_chunks or not self.decode_batch_size:
            return self
        n = self.fork_chunks
        tokens, keys = chunk_rows(self.prefill_chunk_tokens[:n], self.prefill_context_tokens[:n])
        return replace(
            self,
            prefill_chunk_tokens=self.prefill_chunk_tokens[n:],
            prefill_context_tokens=self.prefill_context_tokens[n:],
            decode_extra_tokens=self.decode_extra_tokens + tokens,
            decode_extra_context_sum=self.decode_extra_context_sum + keys,
            fork_chunks=0,
            decode_forks=self.decode_forks + n,
        )

    @property
    def padded_decode_keys(self) -> int:
        """Keys a padding decode attention reads: every sequence as long as the longest."""
        return max(self.decode_context_sum, self.decode_batch_size * self.decode_context_max)


def extra_keys(extra: np.ndarray, context: np.ndarray) -> int:
    """Keys the extra tokens of a step's sequences attend to: (b,) extra tokens each over
    (b,) KV incl. the step's first token; the k-th extra token of a sequence sees c + k."""
    return int(np.dot(extra, context) + (extra * (extra + 1)).sum() // 2)


def prefill_reach(chunk_tokens: Iterable[int], context_tokens: Iterable[int]) -> int:
    """P of the decode steps after a prefilling step: the prompt tokens it computed and the
    cached ones its chunks' attention read (their eviction grows with both: on the CPU
    engine the decode steps after a chunk over earlier chunks' KV ran 4-7 % over a price by
    the chunk's own tokens, within 1 % by both)."""
    return sum(chunk_tokens) + sum(context_tokens)


class CostModel(ABC):
    """Step durations for one replica (all its tensor-parallel GPUs together)."""

    @abstractmethod
    def step_time_s(self, work: StepWork) -> float:
        """Duration of one step."""

    def wake_s(self, idle_s: float) -> float:
        """Extra time of a step that starts an engine idle for `idle_s` (caches gone cold).
        Only a calibrated profile measures it; other models price a warm engine."""
        return 0.0

    @property
    def after_prefill_steps(self) -> int:
        """How many decode steps after a prefill pay `after_prefill_s` (0: none)."""
        return 0

    def after_prefill_s(self, prefill_tokens: int, steps_after: int) -> float:
        """Extra time of the `steps_after`-th decode (or verify) step after a step whose
        `prefill_reach` was `prefill_tokens` (1: right after it): its working set evicted by
        the prompt's. Only a calibrated profile measures it; other models price a warm engine."""
        return 0.0

    @abstractmethod
    def decode_span_s(
        self, batch_size: int, context_sum: int, n_steps: int, context_max: int = 0
    ) -> np.ndarray:
        """Durations of `n_steps` consecutive decode-only steps of `batch_size` sequences.

        Step i (from 0) has `decode_context_sum = context_sum + i * batch_size` and
        `decode_context_max = context_max + i` (0 stays 0: not known). Element i must equal
        `step_time_s` of that StepWork bit for bit: the simulator's bulk stepping relies on it.
        """


class SplitCostModel(CostModel):
    """A cost model with one vectorised formula for decode-only steps and another for steps
    with prefill. Every decode-only step goes through `_decode_times_s`, so a span and a
    single step agree bit for bit as long as that function is elementwise."""

    def step_time_s(self, work: StepWork) -> float:
        if not work.prefill_chunk_tokens and not work.decode_extra_tokens:
            sums = np.array([float(work.decode_context_sum)])
            maxes = np.array([float(work.decode_context_max)])
            return float(self._decode_times_s(work.decode_batch_size, sums, maxes)[0])
        return self._mixed_time_s(work)

    def decode_span_s(
        self, batch_size: int, context_sum: int, n_steps: int, context_max: int = 0
    ) -> np.ndarray:
        steps = np.arange(n_steps, dtype=np.int64)
        sums = (context_sum + steps * batch_size).astype(np.float64)  # (n_steps,)
        maxes = (context_max + steps if context_max else 0 * steps).astype(np.float64)
        return self._decode_times_s(batch_size, sums, maxes)

    @abstractmethod
    def _decode_times_s(
        self, batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray
    ) -> np.ndarray:
        """Durations of decode-only steps, one per (context sum, longest context) pair, the
        longest 0 where not known (elementwise arithmetic only)."""

    @abstractmethod
    def _mixed_time_s(self, work: StepWork) -> float:
        """Duration of a step with a prefill chunk or multi-token decodes."""
