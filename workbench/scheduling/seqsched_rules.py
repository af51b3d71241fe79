"""The schedule of one group in sequence scheduling (Zheng et al., 2023): which requests run
together and where each batch stops. Pure functions of the predictions, deterministic, so
every backend runs the same batches and a test can read them.

Inside a group of requests (taken in arrival order):
- `order: predicted` sorts by predicted length (stable, ascending); `arrival` keeps order;
- without VBS, consecutive batches of the base batch size;
- with VBS (variable batch size), predictions are rounded up to a multiple of 50 (exact
  multiples stay), requests are grouped by that bucket, and each bucket is cut into
  consecutive batches of its own size (`VBS_BATCH_SIZES`). A bucket's tail batch smaller
  than max(size / 2, 16), in a bucket below the group's largest, moves to the end of the
  next non-empty bucket instead (it is batched there, with that bucket's size and cap);
- a batch stops when all its members are done or at its cap: the generation limit, or
  with FCR (failure collection and recomputation) its predicted length: the bucket with
  VBS, the largest member prediction without. The paper's code (`over_limit: recompute`)
  keeps that cap even above the limit (a 550 bucket runs 550 steps); `truncate` clips it;
- FCR failures (members not done at an FCR cap) are recomputed after the group's
  batches, in the order they failed, in batches of the base size, with the limit as cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

VBS_BUCKET_TOKENS = 50
VBS_BATCH_SIZES = {50: 256, 100: 128, 150: 64, 200: 32}  # bucket → batch size
VBS_LONG_BATCH_SIZE = 16  # buckets of 250 tokens and more
VBS_MIN_TAIL = 16  # a tail batch below max(size / 2, this) moves to the next bucket

# What becomes of a response longer than the generation limit (see SequenceScheduling).
OverLimit = Literal["recompute", "truncate"]


@dataclass(frozen=True)
class ScheduleRules:
    batch_size: int  # base batch size (no VBS, and FCR recompute batches)
    generation_limit: int  # most tokens a request generates
    order: Literal["predicted", "arrival"] = "predicted"
    vbs: bool = False
    fcr: bool = False
    over_limit: OverLimit = "recompute"  # the paper's code; "truncate": the limit is hard


@dataclass(frozen=True)
class PlannedBatch:
    request_ids: tuple[int, ...]  # the members, in slot order
    cap_tokens: int  # the batch stops after this many tokens, members done or not
    recompute: bool = False  # an FCR recompute batch


def vbs_bucket(predicted_tokens: int) -> int:
    """The prediction rounded up to a multiple of 50; exact multiples stay."""
    return -(-predicted_tokens // VBS_BUCKET_TOKENS) * VBS_BUCKET_TOKENS


def vbs_batch_size(bucket: int) -> int:
    return VBS_BATCH_SIZES.get(bucket, VBS_LONG_BATCH_SIZE)


def plan_group(requests: list[tuple[int, int]], rules: ScheduleRules) -> list[PlannedBatch]:
    """The batches of one group. `requests`: (request id, predicted tokens), arrival order."""
    ranked = requests
    if rules.order == "predicted":
        ranked = sorted(requests, key=lambda r: r[1])  # stable: ties keep arrival order
    predicted = dict(requests)
    if rules.vbs:
        batches = _vbs_batches(ranked)
    else:
        batches = [(ids, max(predicted[i] for i in ids)) for ids in _chunks(ranked, rules)]
    return [PlannedBatch(tuple(ids), _cap(value, rules)) for ids, value in batches]


def plan_recompute(failed_ids: list[int], rules: ScheduleRules) -> list[PlannedBatch]:
    """FCR: the failures, in failure order, in base-size batches with the full limit."""
    size = rules.batch_size
    return [
        PlannedBatch(tuple(failed_ids[i : i + size]), rules.generation_limit, recompute=True)
        for i in range(0, len(failed_ids), size)
    ]


def _cap(predicted_tokens: int, rules: ScheduleRules) -> int:
    if not rules.fcr:
        return rules.generation_limit
    if rules.over_limit == "truncate":
        return min(predicted_tokens, rules.generation_limit)
    return predicted_tokens  # the paper's code: `max_length` = the bucket, even above 512


def _chunks(ranked: list[tuple[int, int]], rules: ScheduleRules) -> list[list[int]]:
    ids = [request_id for request_id, _ in ranked]
    return [ids[i : i + rules.batch_size] for i in range(0, len(ids), rules.batch_size)]


def _vbs_batches(ranked: list[tuple[int, int]]) -> list[tuple[list[int], int]]:
    """(members, bucket) per batch, buckets ascending."""
    buckets: dict[int, list[int]] = {}
    for request_id, predicted_tokens in ranked:
        buckets.setdefault(vbs_bucket(predicted_tokens), []).append(request_id)
    order = sorted(buckets)
    batches: list[tuple[list[int], int]] = []
    for index, bucket in enumerate(order):
        size = vbs_batch_size(bucket)
        members = buckets[bucket]  # may have grown by the previous bucket's tail
        chunks = [members[i : i + size] for i in range(0, len(members), size)]
        if bucket < order[-1] and len(chunks[-1]) < max(size // 2, VBS_MIN_TAIL):
            buckets[order[index + 1]].extend(chunks.pop())
        batches += [(chunk, bucket) for chunk in chunks]
    return batches
