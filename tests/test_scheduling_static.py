"""Static batching: batches in arrival order, padded, running until the longest member ends."""

from __future__ import annotations

from workbench.scheduling.sequence import Sequence
from workbench.scheduling.static import StaticBatching


def seq(request_id: int, prompt: int, output: int, arrival_s: float = 0.0) -> Sequence:
    return Sequence(
        request_id=request_id, arrival_s=arrival_s, prompt_tokens=prompt, output_tokens=output
    )


def test_batch_runs_padded_until_longest_member_and_members_finish_at_their_own_length() -> None:
    p = StaticBatching(num_blocks=1000, block_size=4, batch_size=3)
    for s in (seq(0, 5, 2), seq(1, 9, 6), seq(2, 3, 4), seq(3, 4, 1)):
        p.add(s, 0.0)
    plan = p.schedule(0.0)
    assert plan is not None
    assert [c.tokens for c in plan.prefills] == [9, 9, 9]  # padded to the longest prompt
    finished_at: dict[int, int] = {}
    steps = 0
    while p.batch or steps == 0:
        result = p.complete(plan, plan.repeatable_steps)
        steps += plan.repeatable_steps
        finished_at.update({s.request_id: steps for s in result.finished})
        plan = p.schedule(0.0) if p.batch else None
        if plan is not None:
            assert plan.decode_batch_size == 3  # finished members stay as padding
    assert finished_at == {0: 2, 2: 4, 1: 6}
    assert p.waiting[0].request_id == 3  # the next batch starts after this one


def test_partial_batch_waits_up_to_max_wait() -> None:
    p = StaticBatching(num_blocks=1000, block_size=4, batch_size=4, max_wait_s=1.0)
    p.add(seq(0, 5, 2, arrival_s=0.0), 0.0)
    assert p.schedule(0.5) is None
    assert p.next_wakeup_s(0.5) == 1.0
    plan = p.schedule(1.0)
    assert plan is not None and len(plan.prefills) == 1


def test_batch_shrinks_to_fit_the_kv_rectangle() -> None:
    # Each member needs ceil((8 + 8) / 4) = 4 blocks; 10 blocks hold two members.
    p = StaticBatching(num_blocks=10, block_size=4, batch_size=4)
    for i in range(4):
        p.add(seq(i, 8, 8), 0.0)
    plan = p.schedule(0.0)
    assert plan is not None and len(plan.prefills) == 2
    assert int(plan.kv_blocks_used[0]) == 8
