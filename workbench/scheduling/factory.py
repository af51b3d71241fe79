"""Build a replica's batching policy from the scenario's scheduler section."""

from __future__ import annotations

from collections.abc import Callable

from workbench.errors import WorkbenchError
from workbench.scenario.seqsched import SequenceSchedulingConfig
from workbench.scenario.system import (
    ContinuousBatchingConfig,
    SchedulerConfig,
    StaticBatchingConfig,
)
from workbench.scheduling.blocks import blocks_for
from workbench.scheduling.continuous import WATERMARK, ContinuousBatching
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.seqsched_rules import ScheduleRules
from workbench.scheduling.sequence_scheduling import SequenceScheduling
from workbench.scheduling.static import StaticBatching
from workbench.scheduling.waiting_queue import build_waiting_queue


def _continuous(
    cfg: ContinuousBatchingConfig,
    num_blocks: int,
    slots: int,
    branching: bool = False,
    swap_blocks: int = 0,
) -> BatchPolicy:
    return ContinuousBatching(
        num_blocks=num_blocks,
        block_size=cfg.kv_cache.block_size,
        max_batch_size=cfg.max_batch_size,
        max_batched_tokens=cfg.max_batched_tokens,
        chunked_prefill=cfg.chunked_prefill,
        chunk_size=cfg.chunk_size,
        lookahead_slots=slots,
        waiting=build_waiting_queue(cfg.admission),
        whole_prompt_blocks=cfg.prompt_blocks == "whole_prompt",
        branching=branching,
        swap_blocks=swap_blocks,
    )


def _static(cfg: StaticBatchingConfig, num_blocks: int, slots: int) -> BatchPolicy:
    if slots:
        raise WorkbenchError(
            "static batching runs vanilla decoding; use scheduler.kind: continuous for "
            "speculative or lookahead decoders",
            field="scheduler.kind",
        )
    return StaticBatching(
        num_blocks=num_blocks,
        block_size=cfg.kv_cache.block_size,
        batch_size=cfg.batch_size,
        max_wait_s=cfg.max_wait_s,
    )


def _sequence_scheduling(cfg: SequenceSchedulingConfig, num_blocks: int, slots: int) -> BatchPolicy:
    if slots:
        raise WorkbenchError(
            "sequence scheduling runs vanilla decoding; use scheduler.kind: continuous for "
            "speculative or lookahead decoders",
            field="scheduler.kind",
        )
    rules = ScheduleRules(
        batch_size=cfg.batch_size,
        generation_limit=cfg.generation_limit,
        order=cfg.order,
        vbs=cfg.vbs,
        fcr=cfg.fcr,
        over_limit=cfg.over_limit,
    )
    return SequenceScheduling(
        num_blocks=num_blocks,
        block_size=cfg.kv_cache.block_size,
        rules=rules,
        group_size=cfg.group_size,
    )


POLICIES: dict[str, Callable[..., BatchPolicy]] = {
    "continuous": _continuous,
    "static": _static,
    "sequence_scheduling": _sequence_scheduling,
}


def build_policy(
    cfg: SchedulerConfig,
    num_blocks: int,
    lookahead_slots: int = 0,
    branching: bool = False,
    swap_blocks: int = 0,
) -> BatchPolicy:
    """`lookahead_slots`: KV slots a multi-token decoder writes per decode beyond one.
    `branching`: sequences fork branches (APAR), which continuous batching alone admits.
    `swap_blocks`: host memory, in KV blocks, for requests with several live branches."""
    if branching:
        if not isinstance(cfg, ContinuousBatchingConfig):
            raise WorkbenchError(
                "APAR forks branches under continuous batching only; use scheduler.kind: "
                "continuous",
                field="scheduler.kind",
            )
        return _continuous(cfg, num_blocks, lookahead_slots, True, swap_blocks)
    return POLICIES[cfg.kind](cfg, num_blocks, lookahead_slots)


def check_feasible(
    cfg: SchedulerConfig,
    num_blocks: int,
    max_prompt_tokens: int,
    max_total_tokens: int,
    *,
    source: str | None,
    lookahead_slots: int = 0,
) -> None:
    """Refuse configurations in which some request could never be served. A multi-token
    decoder's `lookahead_slots` are held on top of a decoding request's own tokens.

    `max_total_tokens` is the largest prompt + output. The last emitted token is never
    written to the KV cache, so a request holds at most prompt + output − 1 tokens, and a
    recompute after a preemption prefills at most that many.
    """
    block_size = cfg.kv_cache.block_size
    cached = max_total_tokens - 1
    usable = num_blocks
    if isinstance(cfg, ContinuousBatchingConfig):
        usable = num_blocks - int(WATERMARK * num_blocks)
        budget = cfg.chunk_size if cfg.chunked_prefill else cfg.max_batched_tokens
        if cfg.max_batch_size > budget:
            field = "chunk_size" if cfg.chunked_prefill else "max_batched_tokens"
            raise WorkbenchError(
                f"the step token budget ({budget}) is below max_batch_size "
                f"({cfg.max_batch_size}): decodes alone could exceed it; raise it",
                source=source,
                field=f"scheduler.{field}",
            )
        if not cfg.chunked_prefill and cached > cfg.max_batched_tokens:
            raise WorkbenchError(
                f"a request of {max_total_tokens} tokens recomputes {cached} in one step after "
                f"a preemption (prompt + output − 1), over max_batched_tokens="
                f"{cfg.max_batched_tokens}; enable chunked_prefill or raise max_batched_tokens",
                source=source,
                field="scheduler.max_batched_tokens",
            )
    held = cached + lookahead_slots
    if blocks_for(held, block_size) > usable:
        slots = f" (+{lookahead_slots} lookahead slots)" if lookahead_slots else ""
        raise WorkbenchError(
            f"a request of {max_total_tokens} tokens (caching {cached}{slots}) needs "
            f"{blocks_for(held, block_size)} KV blocks but a replica has {usable} "
            "usable; use bigger hardware, more tensor parallelism or shorter requests",
            source=source,
            field="scheduler.kv_cache",
        )
