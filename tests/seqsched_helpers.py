"""Shared helpers for sequence-scheduling tests: hand-made requests, a bare engine loop,
and the inspectable batch list that every backend must reproduce."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.seqsched_rules import ScheduleRules
from workbench.scheduling.sequence import Sequence
from workbench.scheduling.sequence_scheduling import SequenceScheduling
from workbench.workload.requests import Workload

Batch = tuple[tuple[int, ...], int, bool]  # (request ids, cap tokens, recompute)


def seq(request_id: int, output: int, predicted: int | None = None, prompt: int = 8) -> Sequence:
    return Sequence(
        request_id=request_id,
        arrival_s=0.0,
        prompt_tokens=prompt,
        output_tokens=output,
        predicted_tokens=predicted,
    )


def seqsched(
    group_size: int = 256, num_blocks: int = 100_000, **rules: object
) -> SequenceScheduling:
    defaults: dict[str, object] = {"batch_size": 2, "generation_limit": 512}
    return SequenceScheduling(
        num_blocks=num_blocks,
        block_size=4,
        rules=ScheduleRules(**(defaults | rules)),  # type: ignore[arg-type]
        group_size=group_size,
    )


@dataclass
class Driven:
    """What a bare engine loop saw: finish order, generated tokens, evictions, steps."""

    finished: list[int] = field(default_factory=list)
    generated: dict[int, int] = field(default_factory=dict)
    preempted: list[int] = field(default_factory=list)
    steps: int = 0


def drive(policy: BatchPolicy, bulk: bool = True) -> Driven:
    """Run the policy to the end as an engine would, `repeatable_steps` at a time."""
    out = Driven()
    while (plan := policy.schedule(0.0)) is not None:
        out.preempted += [s.request_id for s in plan.preempted]
        n = plan.repeatable_steps if bulk else 1
        result = policy.complete(plan, n)
        out.steps += n
        for s in result.finished:
            out.finished.append(s.request_id)
            out.generated[s.request_id] = s.generated
    return out


def batches_of(policy: SequenceScheduling) -> list[Batch]:
    """The batches the policy ran, comparable across backends."""
    return [
        (log.planned.request_ids, log.planned.cap_tokens, log.planned.recompute)
        for log in policy.batch_log
    ]


def batch_workload(outputs: list[int], predicted: list[int], prompt: int = 8) -> Workload:
    """Every request at t = 0 (offline batch inference), with its predictions."""
    n = len(outputs)
    return Workload(
        arrival_s=np.zeros(n),
        prompt_tokens=np.full(n, prompt, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
        predicted_tokens=np.array(predicted, dtype=np.int64),
    )
