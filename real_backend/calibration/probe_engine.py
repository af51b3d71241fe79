"""The real engine, noting what each step computed: the points a calibration stores.

A probe is a short serving run of the `RealEngine` itself (its policy, prefill grouping,
decoder, bookkeeping), so what a step costs here is what it costs when serving. Each step's
work is taken from the plan the policy handed the engine, in the terms of the simulator's
`StepWork`, and its cost is the wall time from the end of the previous step to the end of
this one: scheduling and bookkeeping included, aligned with the emission times a
simulated twin must reproduce. A step the engine slept before costs from the moment it had
work again (the arrival it slept until) to its end, and notes how long it had been idle:
a simulated engine starts that step at the arrival too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from real_backend.decoders.base import DecodeOutcome
from real_backend.engine import RealEngine
from workbench.records import DraftForwards, RunRecords, StepRecords
from workbench.scheduling.plan import StepPlan, chunk_rows, forward_split
from workbench.store.profiles import ProfilePoint
from workbench.workload.requests import Workload


@dataclass(frozen=True)
class StepShape:
    """A step's work as the simulator's StepWork counts it."""

    prefill_chunk_tokens: tuple[int, ...]
    prefill_context_tokens: tuple[int, ...]
    decode_batch_size: int
    decode_context_sum: int
    decode_context_max: int
    decode_extra_tokens: int
    decode_extra_context_sum: int
    woke_at_s: float | None  # the work the engine slept until, when it slept before this step
    decode_forks: int = 0  # APAR forks' chunks among the extra rows


def extra_context_sum(extra_per_sequence: int, batch: int, context_sum: int) -> int:
    """Keys the extra tokens of a chain attend to: the k-th extra token of a sequence whose KV
    holds c tokens (its first new token included) sees c + k keys."""
    w = extra_per_sequence
    return w * context_sum + batch * w * (w + 1) // 2


def step_shape(plan: StepPlan, outcome: DecodeOutcome | None, woke_at_s: float | None) -> StepShape:
    """What the engine computed for `plan`, as the simulator's StepWork counts it: the
    decodes' extra rows (a verification's drafts or window, and APAR's forks' chunks, which
    run in the decode forward: `forward_split`), the other chunks as prefill."""
    # A static batch's plan counts its finished members as padding slots the engine does
    # not decode (verified < batch): no extra tokens, not a negative count.
    batch = plan.decode_batch_size
    extra = max(outcome.verified - batch, 0) if outcome else 0
    per_sequence = extra // batch if batch else 0
    forks, chunks = forward_split(plan)
    fork_rows, fork_keys = chunk_rows((c.tokens for c in forks), (c.context_tokens for c in forks))
    return StepShape(
        prefill_chunk_tokens=tuple(c.tokens for c in chunks),
        prefill_context_tokens=tuple(c.context_tokens for c in chunks),
        decode_batch_size=batch,
        decode_context_sum=plan.decode_context_sum,
        decode_context_max=plan.decode_context_max,
        decode_extra_tokens=extra + fork_rows,
        decode_extra_context_sum=fork_keys
        + extra_context_sum(per_sequence, batch, plan.decode_context_sum),
        decode_forks=len(forks),
        woke_at_s=woke_at_s,
    )


class ProfilingEngine(RealEngine):
    """`RealEngine` that keeps each step's `StepShape` beside its records."""

    shapes: list[StepShape]
    drafts: list[DraftForwards]  # each step's draft forwards (none without a draft model)

    def serve(
        self,
        workload: Workload,
        prompts: list[list[int]],
        progress: Callable[[int], None] | None = None,
    ) -> tuple[RunRecords, dict[int, list[int]]]:
        self.shapes, self.drafts = [], []
        self._woke_at_s: float | None = None
        self.decoder.note_draft_forwards()
        return super().serve(workload, prompts, progress)

    def _wait_for_work(self) -> None:
        self._woke_at_s = self._next_wake_s(self._now())
        super()._wait_for_work()

    def _record_step(
        self,
        plan: StepPlan,
        start_s: float,
        end_s: float,
        emitted: dict[int, list[int]],
        prefill_tokens: int,
        outcome: DecodeOutcome | None,
        accepted: int,
    ) -> None:
        super()._record_step(plan, start_s, end_s, emitted, prefill_tokens, outcome, accepted)
        if outcome is not None:
            self.drafts.append(DraftForwards(tuple(outcome.draft_forwards), outcome.draft_s))
        self.shapes.append(step_shape(plan, outcome, self._woke_at_s))
        self._woke_at_s = None


def probe_points(probe: str, shapes: list[StepShape], steps: StepRecords) -> list[ProfilePoint]:
    """A probe's points: every step but the first, which follows no step (its cost would
    include the wait for the first arrival). Each is the target's share of its step: a
    speculative step's draft forwards (`draft_s`, which the draft's own profile prices) are
    left out of its times."""
    draft_s = np.nan_to_num(steps.draft_s)  # (n_steps,)
    ends = steps.start_s + steps.duration_s  # (n_steps,)
    points = []
    for i, shape in enumerate(shapes):
        if i == 0:
            continue
        woke = shape.woke_at_s
        idle_s = 0.0 if woke is None else max(woke - float(ends[i - 1]), 0.0)
        began = float(ends[i - 1]) + idle_s  # the previous end, or the arrival slept until
        points.append(
            ProfilePoint(
                probe=probe,
                step=i,
                prefill_chunk_tokens=shape.prefill_chunk_tokens,
                prefill_context_tokens=shape.prefill_context_tokens,
                decode_batch_size=shape.decode_batch_size,
                decode_context_sum=shape.decode_context_sum,
                decode_context_max=shape.decode_context_max,
                decode_extra_tokens=shape.decode_extra_tokens,
                decode_extra_context_sum=shape.decode_extra_context_sum,
                decode_forks=shape.decode_forks,
                forward_s=float(steps.duration_s[i] - draft_s[i]),
                step_s=float(ends[i]) - began - float(draft_s[i]),
                idle_before_s=idle_s,
            )
        )
    return points
