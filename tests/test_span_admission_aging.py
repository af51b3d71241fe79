"""Decode spans and aging admission: a blocked queue head that ages into another request
must end a bulk span exactly where step-by-step stepping replans (issue 21, bug 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_helpers import step_by_step

from simulator.run import simulate
from workbench.scenario.loader import load_scenario
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.sequence import Sequence
from workbench.scheduling.waiting_queue import RankedQueue, predicted

TRACE = "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,16,400\n0.05,16,100\n0.05,620,5\n"
SCENARIO = """
name: aging-span
seed: 0
workload:
  num_requests: 3
  arrival: {kind: trace, path: trace.csv}
  lengths_from_trace: {path: trace.csv}
model: {name: llama-3-8b}
hardware: {gpu: h100-sxm}
cost_model: {kind: fixed_step, step_ms: 10}
scheduler:
  kind: continuous
  max_batch_size: 8
  max_batched_tokens: 2048
  chunked_prefill: true
  chunk_size: 1024
  admission: {kind: ADMISSION, aging_s: 0.5}
  kv_cache: {block_size: 16, num_blocks: 40}
"""


@pytest.mark.parametrize("admission", ["shortest_predicted", "length_buckets"])
def test_aged_request_is_admitted_mid_span(tmp_path: Path, admission: str) -> None:
    (tmp_path / "trace.csv").write_text(TRACE)
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("ADMISSION", admission))
    scenario = load_scenario(path)
    bulk, stepped = simulate(scenario), simulate(step_by_step(scenario))
    ttft = bulk.requests.first_token_s - bulk.requests.arrival_s
    # Request 2 (620-token prompt) heads the queue but cannot fit; request 1 ages at
    # 0.05 + 0.5 s and is admitted by the first step starting after that: 0.56 s, 0.51 s.
    assert ttft[1] == pytest.approx(0.51)
    assert list(ttft) == list(stepped.requests.first_token_s - stepped.requests.arrival_s)


def _queued(request_id: int, predicted_tokens: int, arrival_s: float) -> Sequence:
    return Sequence(request_id, arrival_s, 16, predicted_tokens, predicted_tokens)


def test_the_plan_says_when_the_head_ages() -> None:
    policy = ContinuousBatching(
        num_blocks=40, block_size=16, max_batch_size=8, max_batched_tokens=2048,
        waiting=RankedQueue(predicted, aging_s=0.5),
    )  # fmt: skip
    policy.add(_queued(0, 400, 0.0), 0.0)
    plan = policy.schedule(0.0)
    assert plan is not None
    policy.complete(plan)
    blocked = _queued(2, 5, 0.05)
    blocked.prompt_tokens = 620  # 39 blocks: cannot be admitted beside request 0
    policy.add(_queued(1, 100, 0.05), 0.05)
    policy.add(blocked, 0.05)
    plan = policy.schedule(0.06)
    assert plan is not None and not plan.prefills and plan.repeatable_steps > 1
    assert plan.replan_at_s == 0.05 + 0.5  # request 1 ages past the blocked head then


def test_no_deadline_once_the_oldest_heads_the_queue() -> None:
    queue = RankedQueue(predicted, aging_s=0.5)
    queue.append(_queued(0, 50, 0.0))
    queue.append(_queued(1, 5, 0.1))
    assert queue.head().request_id == 1
    assert queue.head_changes_at_s() == 0.5  # request 0 ages past the shorter head then
    queue.popleft()
    assert queue.head_changes_at_s() is None  # request 0 heads the queue already
    queue.appendleft(_queued(2, 500, 0.2))  # a preempted sequence heads until admitted
    queue.append(_queued(3, 1, 0.3))
    assert queue.head_changes_at_s() is None
