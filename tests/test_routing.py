"""Routers: round robin, least outstanding (queued + running), least waiting (queued only,
Vidur's `lor`)."""

from __future__ import annotations

from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.routing import build_router
from workbench.scheduling.sequence import Sequence


def _replicas(running: list[int], queued: list[int]) -> list[ContinuousBatching]:
    replicas = []
    next_id = 0
    for run, wait in zip(running, queued, strict=True):
        policy = ContinuousBatching(
            num_blocks=1000, block_size=16, max_batch_size=run, max_batched_tokens=4096
        )
        for _ in range(run + wait):
            policy.add(Sequence(next_id, 0.0, 16, 8), 0.0)
            next_id += 1
        plan = policy.schedule(0.0)  # admits `run` requests (the batch limit), leaves the rest
        assert plan is not None and len(plan.prefills) == run
        replicas.append(policy)
    return replicas


def test_least_outstanding_counts_running_requests_too() -> None:
    assert build_router("least_outstanding").pick(_replicas([5, 1], [0, 2])) == 1


def test_least_waiting_counts_only_the_queue() -> None:
    assert build_router("least_waiting").pick(_replicas([5, 1], [0, 2])) == 0


def test_least_waiting_ties_go_to_the_first_replica() -> None:
    replicas = _replicas([3, 1, 2], [0, 0, 0])
    router = build_router("least_waiting")
    assert [router.pick(replicas) for _ in range(3)] == [0, 0, 0]  # nothing queued anywhere
