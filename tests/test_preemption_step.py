"""A step that preempts admits nobody (vLLM's rule), so a victim is not handed a new prefill
chunk in the very plan that evicted it (issue 21, bug 2)."""

from __future__ import annotations

from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.plan import StepPlan
from workbench.scheduling.sequence import Sequence


def _run_until_preemption(policy: ContinuousBatching) -> StepPlan:
    for _ in range(100):
        plan = policy.schedule(0.0)
        assert plan is not None
        if plan.preempted:
            return plan
        policy.complete(plan)
    raise AssertionError("no preemption")


def _thrashing_policy() -> ContinuousBatching:
    # Six blocks of 4: two 8-token prompts decoding towards 20 tokens outgrow them; chunked
    # prefill would fit a victim's first chunk (2 blocks) into what its eviction frees.
    policy = ContinuousBatching(
        num_blocks=6, block_size=4, max_batch_size=4, max_batched_tokens=8,
        chunked_prefill=True, chunk_size=8,
    )  # fmt: skip
    for request_id in (0, 1):
        policy.add(Sequence(request_id, 0.0, 8, 12), 0.0)
    return policy


def test_a_preempting_step_admits_nobody() -> None:
    policy = _thrashing_policy()
    plan = _run_until_preemption(policy)
    assert [s.request_id for s in plan.preempted] == [1]
    assert plan.prefills == []  # request 1 would fit a first chunk, but not this step
    assert plan.repeatable_steps == 1  # the next step may admit: no span past this one
    policy.complete(plan)
    again = policy.schedule(0.0)
    assert again is not None
    assert [c.seq.request_id for c in again.prefills] == [1]


def test_every_request_still_finishes() -> None:
    policy = _thrashing_policy()
    finished: list[int] = []
    while (plan := policy.schedule(0.0)) is not None:
        finished += [s.request_id for s in policy.complete(plan).finished]
    assert sorted(finished) == [0, 1] and policy.used_blocks == 0
