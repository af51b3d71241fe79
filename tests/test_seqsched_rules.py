"""The paper's schedule on small hand-made groups: sorting, VBS buckets and batch sizes,
tail moves into the next non-empty bucket, FCR caps and recompute batches."""

from __future__ import annotations

import pytest

from workbench.scheduling.seqsched_rules import (
    PlannedBatch,
    ScheduleRules,
    plan_group,
    plan_recompute,
    vbs_batch_size,
    vbs_bucket,
)

BASE = ScheduleRules(batch_size=2, generation_limit=512)
VBS = ScheduleRules(batch_size=16, generation_limit=512, vbs=True)


@pytest.mark.parametrize(
    ("predicted", "bucket"),
    [(1, 50), (49, 50), (50, 50), (51, 100), (100, 100), (101, 150), (349, 350), (350, 350)],
)
def test_vbs_bucket_rounds_up_and_exact_multiples_stay(predicted: int, bucket: int) -> None:
    assert vbs_bucket(predicted) == bucket


@pytest.mark.parametrize(
    ("bucket", "size"),
    [(50, 256), (100, 128), (150, 64), (200, 32), (250, 16), (300, 16), (350, 16), (900, 16)],
)
def test_bucket_batch_sizes(bucket: int, size: int) -> None:
    assert vbs_batch_size(bucket) == size


def ids(batches: list[PlannedBatch]) -> list[tuple[int, ...]]:
    return [b.request_ids for b in batches]


def test_sorted_stable_batches_of_the_base_size() -> None:
    group = [(0, 30), (1, 10), (2, 30), (3, 5), (4, 10)]
    assert ids(plan_group(group, BASE)) == [(3, 1), (4, 0), (2,)]  # ties keep arrival order


def test_arrival_order_keeps_the_group_order_and_caps_at_the_limit() -> None:
    rules = ScheduleRules(batch_size=2, generation_limit=512, order="arrival")
    batches = plan_group([(0, 30), (1, 10), (2, 5)], rules)
    assert ids(batches) == [(0, 1), (2,)]
    assert [b.cap_tokens for b in batches] == [512, 512]


@pytest.mark.parametrize(
    ("over_limit", "caps"), [("recompute", [20, 700]), ("truncate", [20, 100])]
)
def test_fcr_caps_a_batch_at_its_largest_prediction(over_limit: str, caps: list[int]) -> None:
    # The paper's code keeps a cap above the limit (its `max_length` is the prediction);
    # truncation clips it to the limit.
    rules = ScheduleRules(2, 100, fcr=True, over_limit=over_limit)  # type: ignore[arg-type]
    batches = plan_group([(0, 30), (1, 10), (2, 700), (3, 20)], rules)
    assert ids(batches) == [(1, 3), (0, 2)]
    assert [b.cap_tokens for b in batches] == caps


def test_vbs_fcr_keeps_the_550_bucket_cap_above_a_512_limit() -> None:
    batches = plan_group([(0, 513), (1, 40)], ScheduleRules(16, 512, vbs=True, fcr=True))
    assert [(b.request_ids, b.cap_tokens) for b in batches] == [((0, 1), 550)]  # 50's tail moved


def test_vbs_cuts_each_bucket_with_its_own_size() -> None:
    # 300 requests in bucket 50 (size 256, tail 44 >= 16 but < 128 would move, yet 50 is
    # the largest bucket here, so the tail stays).
    group = [(i, 1 + i % 50) for i in range(300)]
    batches = plan_group(group, VBS)
    assert [len(b.request_ids) for b in batches] == [256, 44]
    assert {b.cap_tokens for b in batches} == {512}  # no FCR: the limit


def test_small_tail_moves_into_the_next_non_empty_bucket() -> None:
    # bucket 100 (size 128): 20 requests, below max(64, 16) → moved past the empty bucket 150
    # into bucket 200 (size 32), after its own 40: 60 there → batches of 32 and 28.
    short = [(i, 80) for i in range(20)]
    long = [(100 + i, 190) for i in range(40)]
    batches = plan_group(short + long, ScheduleRules(16, 512, vbs=True, fcr=True))
    assert ids(batches) == [
        tuple(range(100, 132)),
        tuple(range(132, 140)) + tuple(range(20)),
    ]
    assert [b.cap_tokens for b in batches] == [200, 200]  # the destination bucket's cap


def test_exact_multiples_stay_in_their_bucket() -> None:
    batches = plan_group([(0, 100), (1, 100)], ScheduleRules(16, 512, vbs=True, fcr=True))
    assert ids(batches) == [(0, 1)]
    assert batches[0].cap_tokens == 100  # not 150


def test_moved_tail_goes_after_the_bucket_members_and_the_largest_tail_stays() -> None:
    fcr = ScheduleRules(16, 512, vbs=True, fcr=True)
    batches = plan_group([(0, 100), (1, 100), (2, 400)], fcr)
    assert ids(batches) == [(2, 0, 1)]  # 100's tail appended to 400's; 400's tail stays
    assert batches[0].cap_tokens == 400
    pair = plan_group([(0, 400), (1, 410)], fcr)
    assert ids(pair) == [(1, 0)]  # bucket 400's tail of 1 moves into bucket 450
    assert pair[0].cap_tokens == 450


def test_tail_at_the_threshold_stays() -> None:
    # bucket 300 (size 16, threshold max(8, 16) = 16): 32 requests = two full batches;
    # bucket 250: 16 + 16 = a full one, nothing moves.
    group = [(i, 300) for i in range(32)] + [(100 + i, 250) for i in range(16)]
    batches = plan_group(group, VBS)
    assert ids(batches) == [tuple(range(100, 116)), tuple(range(16)), tuple(range(16, 32))]


def test_moves_chain_through_several_buckets() -> None:
    # 3 in bucket 150 move into 200 (3 + 5 = 8 < 16), then into 300 (8 + 2 = 10 stays: largest).
    group = [(0, 140), (1, 140), (2, 140)] + [(10 + i, 180) for i in range(5)]
    group += [(20, 290), (21, 300)]
    batches = plan_group(group, ScheduleRules(16, 512, vbs=True, fcr=True))
    assert ids(batches) == [(20, 21, 10, 11, 12, 13, 14, 0, 1, 2)]
    assert batches[0].cap_tokens == 300


def test_recompute_batches_keep_failure_order_base_size_and_the_limit() -> None:
    batches = plan_recompute([7, 3, 9, 1, 4], ScheduleRules(batch_size=2, generation_limit=512))
    assert ids(batches) == [(7, 3), (9, 1), (4,)]
    assert all(b.recompute and b.cap_tokens == 512 for b in batches)
