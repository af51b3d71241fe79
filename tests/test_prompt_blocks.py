"""Chunked prompts take their KV blocks chunk by chunk (vLLM V1) or all at admission
(`prompt_blocks: whole_prompt`: vLLM V0, Vidur's Sarathi) (issue 17)."""

from __future__ import annotations

from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.sequence import Sequence


def _policy(whole: bool, num_blocks: int = 100) -> ContinuousBatching:
    return ContinuousBatching(
        num_blocks=num_blocks, block_size=16, max_batch_size=8, max_batched_tokens=4096,
        chunked_prefill=True, chunk_size=64, whole_prompt_blocks=whole,
    )  # fmt: skip


def _blocks_during_prefill(whole: bool) -> list[int]:
    """Blocks in use at each chunk of one 640-token prompt, 64 tokens a step."""
    policy = _policy(whole)
    policy.add(Sequence(0, 0.0, 640, 4), 0.0)
    used = []
    while (plan := policy.schedule(0.0)) is not None and plan.prefills:
        used.append(int(plan.kv_blocks_used[0]))
        policy.complete(plan)
    return used


def test_whole_prompt_blocks_are_taken_at_admission_and_not_again() -> None:
    assert _blocks_during_prefill(whole=True) == [40] * 10  # 640 tokens = 40 blocks at once


def test_per_chunk_blocks_grow_with_the_chunks() -> None:
    assert _blocks_during_prefill(whole=False) == [4 * i for i in range(1, 11)]


def test_a_prompt_whose_blocks_do_not_fit_waits() -> None:
    policy = _policy(whole=True, num_blocks=50)
    policy.add(Sequence(0, 0.0, 640, 4), 0.0)  # 40 blocks
    policy.add(Sequence(1, 0.0, 320, 4), 0.0)  # 20 more would exceed 50
    plan = policy.schedule(0.0)
    assert plan is not None and [c.seq.request_id for c in plan.prefills] == [0]
    per_chunk = _policy(whole=False, num_blocks=50)
    per_chunk.add(Sequence(0, 0.0, 640, 4), 0.0)
    per_chunk.add(Sequence(1, 0.0, 320, 4), 0.0)
    plan = per_chunk.schedule(0.0)  # 64-token budget: the first takes it all
    assert plan is not None and [c.seq.request_id for c in plan.prefills] == [0]
