"""Continuous batching on hand-made queues: admission, budgets, chunking, preemption, KV."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.scheduling.blocks import blocks_for
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.sequence import Sequence


def seq(request_id: int, prompt: int, output: int) -> Sequence:
    return Sequence(
        request_id=request_id, arrival_s=0.0, prompt_tokens=prompt, output_tokens=output
    )


def policy(**overrides: int | bool) -> ContinuousBatching:
    args = dict(num_blocks=1000, block_size=4, max_batch_size=8, max_batched_tokens=40)
    args.update(overrides)
    return ContinuousBatching(**args)  # type: ignore[arg-type]


def test_fcfs_admission_stops_at_first_prompt_over_the_token_budget() -> None:
    p = policy()
    for s in (seq(0, 10, 5), seq(1, 20, 5), seq(2, 30, 5), seq(3, 2, 5)):
        p.add(s, 0.0)
    plan = p.schedule(0.0)
    assert plan is not None
    assert [c.seq.request_id for c in plan.prefills] == [0, 1]  # 2 would exceed 40; 3 waits (FCFS)
    p.complete(plan)
    plan = p.schedule(0.0)
    assert plan is not None
    assert plan.decode_batch_size == 2
    assert [c.seq.request_id for c in plan.prefills] == [2, 3]  # 2 decodes + 30 + 2 ≤ 40


def test_prefill_step_emits_first_token_and_one_token_request_finishes_there() -> None:
    p = policy()
    p.add(seq(0, 5, 1), 0.0)
    p.add(seq(1, 5, 3), 0.0)
    plan = p.schedule(0.0)
    assert plan is not None and plan.emitting == 2
    result = p.complete(plan)
    assert {s.request_id for s in result.started} == {0, 1}
    assert [s.request_id for s in result.finished] == [0]
    assert p.used_blocks == blocks_for(5, 4)  # request 0's blocks are free again


def test_decode_finishes_after_output_tokens_and_frees_all_blocks() -> None:
    p = policy()
    p.add(seq(0, 6, 4), 0.0)
    steps = 0
    while (plan := p.schedule(0.0)) is not None:
        result = p.complete(plan)
        steps += 1
    assert steps == 4  # one prefill step (token 1) + three decode steps
    assert [s.generated for s in result.finished] == [4]
    assert p.used_blocks == 0 and p.outstanding() == 0


def test_chunked_prefill_shares_the_budget_with_decodes_first() -> None:
    p = policy(chunked_prefill=True, chunk_size=8, max_batch_size=4)
    p.add(seq(0, 3, 10), 0.0)
    p.complete(p.schedule(0.0))  # request 0 prefilled, now decoding
    p.add(seq(1, 20, 2), 0.0)
    chunks = []
    while (plan := p.schedule(0.0)) is not None and plan.prefills:
        assert plan.decode_batch_size + plan.prefill_tokens <= 8
        chunks.append(plan.prefills[0].tokens)
        p.complete(plan)
    assert chunks == [7, 7, 6]  # 1 decode + 7 prompt tokens per step until the prompt is done


def test_preemption_evicts_the_newest_and_requeues_it_first() -> None:
    # 6 blocks of 4 tokens. Two prompts of 8 take 2 blocks each; decoding grows them.
    p = policy(num_blocks=6, max_batch_size=4)
    p.watermark_blocks = 0
    p.add(seq(0, 8, 20), 0.0)
    p.add(seq(1, 8, 20), 0.0)
    preempted = []
    while not preempted:
        plan = p.schedule(0.0)
        assert plan is not None
        preempted = plan.preempted
        p.complete(plan)
    victim = preempted[0]
    assert victim.request_id == 1 and victim.preemptions == 1
    assert p.waiting[0] is victim and victim.computed == 0
    assert victim.prefill_target == 8 + victim.generated  # recompute prompt + emitted tokens
    assert p.used_blocks <= p.num_blocks


def test_repeatable_steps_stop_at_the_next_finish_or_block_shortage() -> None:
    p = policy(num_blocks=100)
    p.add(seq(0, 4, 50), 0.0)
    p.add(seq(1, 4, 10), 0.0)
    p.complete(p.schedule(0.0))
    plan = p.schedule(0.0)
    assert plan is not None and plan.repeatable_steps == 9  # request 1 emits tokens 2..10
    tight = policy(num_blocks=4)
    tight.watermark_blocks = 0
    tight.add(seq(0, 4, 50), 0.0)
    tight.complete(tight.schedule(0.0))  # 1 block used; tokens 5.. need new blocks
    plan = tight.schedule(0.0)
    assert plan is not None
    # 3 free blocks hold 12 more tokens: this step's (token 5) and 11 more repeats.
    assert plan.repeatable_steps == 12


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=25),
    num_blocks=st.integers(22, 60),
    chunked=st.booleans(),
    bulk=st.integers(1, 50),
)
def test_block_accounting_invariants(
    lengths: list[tuple[int, int]], num_blocks: int, chunked: bool, bulk: int
) -> None:
    """No leak, never over budget, every request gets exactly its output tokens."""
    p = policy(num_blocks=num_blocks, chunked_prefill=chunked, chunk_size=16, max_batched_tokens=96)
    seqs = [seq(i, a, b) for i, (a, b) in enumerate(lengths)]
    for s in seqs:
        p.add(s, 0.0)
    done = 0
    while (plan := p.schedule(0.0)) is not None:
        assert p.used_blocks <= num_blocks
        assert plan.kv_blocks_used.max() <= num_blocks
        for s in p.running.values():
            if s.request_id in p.decoding.members:
                p.decoding.sync(s, p.step)
        held = sum(s.blocks for s in p.running.values())
        assert held <= p.used_blocks <= held + len(p.decoding)  # + this step's decode blocks
        done += len(p.complete(plan, min(bulk, plan.repeatable_steps)).finished)
    assert done == len(seqs) and p.used_blocks == 0
    assert all(s.generated == s.output_tokens for s in seqs)
