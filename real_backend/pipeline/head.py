"""The head's side of the pipeline: launching runs through the first stage, cancelling
them, applying KV operations in stream order, and taking results back in launch order.

The head computes stage 0 of a run when it launches it and sends the hidden states to
stage 1; with one stage it is also the last and the result is ready at once. Cache
operations decided at the head (free a sequence, keep an accepted path) are applied to its
own cache at once and ride on the next run (or the session's end) to the other stages, so
every stage applies them after the same runs.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep
from real_backend.pipeline.launch import Pipeline
from real_backend.pipeline.messages import (
    Cancel,
    KVOp,
    Payload,
    RunMessage,
    RunResult,
    StageTime,
)
from real_backend.pipeline.runs import Run
from real_backend.pipeline.stage_model import StageModel


@dataclass
class Completion:
    run: Run
    choices: dict[int, int] | None  # node → the target's greedy choice after it
    times: list[StageTime]  # per stage, head first
    received_s: float


class PipelineHead:
    def __init__(
        self,
        stage: StageModel,
        cache: PagedKVCache,
        pipeline: Pipeline | None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.stage = stage
        self.cache = cache
        self.pipeline = pipeline
        self.clock = clock
        self.stages = 1 if pipeline is None else pipeline.world
        self.in_flight: OrderedDict[int, Run] = OrderedDict()
        self._local: deque[RunResult] = deque()  # one stage: results computed at launch
        self._ops: list[KVOp] = []
        self._run_ids = count()  # unique for the session: stages remember cancelled ids

    def new_run_id(self) -> int:
        return next(self._run_ids)

    # ------------------------------------------------------------------ runs

    def launch(self, run: Run) -> None:
        """Compute stage 0 of `run` now and send it down the pipeline."""
        run.launched_s = self.clock()
        fork = None if run.parent_seq is None else (run.parent_seq, len(run.context))
        if run.parent_seq is not None:
            self.cache.fork(run.parent_seq, run.seq)
            self.cache.truncate(run.seq, len(run.context))
        step = SeqStep(run.seq, run.tokens, run.parents)
        out = self.stage.run(self.cache, step, None, run.last_only, _never)
        times = [StageTime(0, self.clock() - run.launched_s, "computed")]
        self.in_flight[run.run_id] = run
        if self.stage.last:
            self._local.append(RunResult(run.run_id, out.tolist(), times))
            return
        message = RunMessage(
            run.run_id, run.seq, run.tokens, run.parents, fork, run.last_only,
            ops=self._take_ops(), hidden=Payload.of(out), times=times,
        )  # fmt: skip
        self.pipeline.send(1, message)

    def cancel(self, runs: list[Run]) -> None:
        """Stop these runs: the cancel goes to the last stage and travels backwards, so the
        stages that have not reached a run yet hear first. Their KV is dropped."""
        if not runs:
            return
        for run in runs:
            run.cancelled = True
            self.free(run.seq)
        if self.pipeline is not None:
            self.pipeline.send(self.stages - 1, Cancel([r.run_id for r in runs]))

    def next_result(self, block: bool) -> Completion | None:
        """The oldest run's result (runs come back in launch order); None if none is there
        and not `block`."""
        if self._local:
            result = self._local.popleft()
        else:
            if self.pipeline is None:
                return None
            result = self.pipeline.next_result(block)
            if result is None:
                return None
        run_id, run = self.in_flight.popitem(last=False)
        if run_id != result.run_id:
            raise RuntimeError(f"run {result.run_id} came back before run {run_id}")
        return Completion(run, _choices(run, result.choices), result.times, self.clock())

    # ------------------------------------------------------------------ KV operations

    def free(self, seq: int) -> None:
        if seq in self.cache.tables:
            self.cache.free(seq)
        self._ops.append(KVOp("free", seq))

    def keep(self, seq: int, start: int, offsets: list[int]) -> None:
        self.cache.keep(seq, start, offsets)
        self._ops.append(KVOp("keep", seq, start, tuple(offsets)))

    def end_session(self) -> None:
        """Wait for every run still in the pipeline, then send the last operations; every
        stage reports its blocks still in use (none: no KV leaked)."""
        while self.in_flight:
            self.next_result(block=True)
        if self.pipeline is not None:
            self.pipeline.end_session(self._take_ops())
        if self.cache.num_free_blocks != self.cache.allocator.num_blocks:
            raise RuntimeError("the head stage's KV cache still holds blocks after the session")

    def _take_ops(self) -> list[KVOp]:
        ops, self._ops = self._ops, []
        return ops


def _never() -> bool:
    return False


def _choices(run: Run, choices: list[int] | None) -> dict[int, int] | None:
    """node → choice: every node's, or the last node's alone for a prompt."""
    if choices is None:
        return None
    if run.last_only:
        return {len(run.tokens) - 1: choices[-1]}
    return dict(enumerate(choices))
