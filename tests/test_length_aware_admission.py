"""Length-aware admission for continuous batching: shortest predicted first, length buckets,
aging against starvation; FCFS stays vLLM's deque."""

from __future__ import annotations

from seqsched_helpers import seq

from workbench.scenario.admission import (
    FcfsAdmission,
    LengthBucketAdmission,
    ShortestPredictedAdmission,
)
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.sequence import Sequence
from workbench.scheduling.waiting_queue import FcfsQueue, RankedQueue, build_waiting_queue


def arrived(request_id: int, predicted: int, at_s: float) -> Sequence:
    s = seq(request_id, predicted, predicted)
    s.arrival_s = at_s
    return s


def drain(queue: RankedQueue | FcfsQueue, now: float = 0.0) -> list[int]:
    queue.set_time(now)
    out = []
    while queue:
        head = queue.head()
        assert queue.popleft() is head
        out.append(head.request_id)
    return out


def test_shortest_predicted_first_ties_in_arrival_order() -> None:
    queue = build_waiting_queue(ShortestPredictedAdmission(kind="shortest_predicted"))
    for i, predicted in enumerate([30, 10, 30, 5, 10]):
        queue.append(seq(i, predicted, predicted))
    assert drain(queue) == [3, 1, 4, 0, 2]


def test_length_buckets_keep_arrival_order_inside_a_bucket() -> None:
    cfg = LengthBucketAdmission(kind="length_buckets", bucket_tokens=50)
    queue = build_waiting_queue(cfg)
    for i, predicted in enumerate([40, 120, 10, 50, 51, 101]):
        queue.append(seq(i, predicted, predicted))
    assert drain(queue) == [0, 2, 3, 4, 1, 5]  # buckets 50: 0, 2, 3; 100: 4; 150: 1, 5


def test_a_preempted_sequence_goes_first() -> None:
    queue = RankedQueue(lambda s: s.predicted_tokens or 0)
    queue.append(seq(0, 5, 5))
    queue.append(seq(1, 50, 50))
    queue.appendleft(seq(2, 99, 99))
    assert drain(queue) == [2, 0, 1]


def test_aged_requests_go_first_oldest_first() -> None:
    queue = RankedQueue(lambda s: s.predicted_tokens or 0, aging_s=10.0)
    for i, (predicted, at_s) in enumerate([(500, 0.0), (400, 3.0), (5, 8.0), (1, 9.0)]):
        queue.append(arrived(i, predicted, at_s))
    assert drain(queue, now=9.5) == [3, 2, 1, 0]  # nobody aged yet: shortest first
    for i, (predicted, at_s) in enumerate([(500, 0.0), (400, 3.0), (5, 8.0), (1, 9.0)]):
        queue.append(arrived(i, predicted, at_s))
    assert drain(queue, now=13.0) == [0, 1, 3, 2]  # 0 and 1 waited ≥ 10 s


def policy(waiting: object = None) -> ContinuousBatching:
    return ContinuousBatching(
        num_blocks=1000, block_size=4, max_batch_size=1, max_batched_tokens=64, waiting=waiting
    )  # type: ignore[arg-type]


def test_fcfs_is_the_default_and_a_plain_deque() -> None:
    p = policy()
    assert isinstance(p.waiting, FcfsQueue)
    assert isinstance(build_waiting_queue(FcfsAdmission(kind="fcfs")), FcfsQueue)
    admitted = _admissions(p, [9, 2, 5])
    assert admitted == [0, 1, 2]


def test_continuous_batching_admits_shortest_predicted_first() -> None:
    spf = build_waiting_queue(ShortestPredictedAdmission(kind="shortest_predicted"))
    assert _admissions(policy(spf), [9, 2, 5]) == [1, 2, 0]


def _admissions(p: ContinuousBatching, outputs: list[int]) -> list[int]:
    for i, output in enumerate(outputs):
        p.add(seq(i, output, output), 0.0)
    admitted = []
    while (plan := p.schedule(0.0)) is not None:
        admitted += [c.seq.request_id for c in plan.prefills]
        p.complete(plan, plan.repeatable_steps)
    return admitted


def _long_request_admitted_at(aging_s: float | None) -> float | None:
    """One long request at t = 0, then a short one every second; one running at a time."""
    cfg = ShortestPredictedAdmission(kind="shortest_predicted", aging_s=aging_s)
    p = policy(build_waiting_queue(cfg))
    p.add(arrived(0, 3, 0.0), 0.0)
    for t in range(60):
        p.add(arrived(t + 1, 1, float(t)), float(t))
        plan = p.schedule(float(t))
        assert plan is not None
        if any(c.seq.request_id == 0 for c in plan.prefills):
            return float(t)
        p.complete(plan, 1)
    return None


def test_aging_prevents_starvation() -> None:
    assert _long_request_admitted_at(None) is None  # short ones keep overtaking it
    assert _long_request_admitted_at(5.0) == 5.0  # admitted once it has waited 5 s
