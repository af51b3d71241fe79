"""A worker stage (rank ≥ 1): load a layer range, then run what comes down the pipeline.

Runs arrive from the previous stage in launch order with the cache operations decided
before them. Cancels arrive from the next stage (the head sends them to the last stage),
are noted by the receiver thread at once, and are passed on backwards; a cancelled run is
skipped before it starts and abandoned between layers. A skipped or abandoned run still
goes on as a marker, so every stage and the head see every run in order.
"""

from __future__ import annotations

import os
import queue
import sys
import time
import traceback
from typing import Any

import torch

from real_backend.model.transformer import SeqStep
from real_backend.pipeline.launch import (
    LOST_PEER_EXIT,
    RELEASE_WAIT_S,
    exit_now,
    file_store,
    process_group,
    stage_name,
)
from real_backend.pipeline.messages import (
    Cancel,
    Closed,
    EndSession,
    Heartbeat,
    KVOp,
    LinkFailure,
    Payload,
    Ready,
    Release,
    RunMessage,
    RunResult,
    SessionClosed,
    Shutdown,
    StageError,
    StageSetup,
    StageTime,
)
from real_backend.pipeline.stage_model import StageModel, load_stage
from real_backend.pipeline.transport import Channel

HEAD = 0


class PeerLost(RuntimeError):
    """A neighbour stage (or the head) is gone; this stage stops too."""


class StageWorker:
    def __init__(
        self,
        group: torch.distributed.ProcessGroup,
        rank: int,
        world: int,
        head_pid: int | None = None,  # a stage started here exits when its head is gone
    ) -> None:
        self.rank = rank
        self.world = world
        self.cancelled: set[int] = set()
        peers = {HEAD, rank - 1, rank + 1} & set(range(world))
        self.channel = Channel(group, rank, peers, self._on_cancel, _is_release)
        self.stage: StageModel | None = None
        self.cache = None
        self.heartbeat_s = 1.0
        self._last_beat = time.monotonic()
        self.head_pid = head_pid

    # ------------------------------------------------------------------ main loop

    def serve(self) -> None:
        """Handle messages until Shutdown, then say Closed and wait for the head's Release;
        any failure is reported to the head, then raised."""
        try:
            while True:
                _src, message = self._next()
                if isinstance(message, Shutdown):
                    break
                self._handle(message)
        except BaseException as exc:
            text = "".join(traceback.format_exception_only(exc)).strip()
            self.channel.send(HEAD, StageError(self.rank, text, isinstance(exc, PeerLost)))
            self.channel.flush()
            raise
        self.channel.send(HEAD, Closed(self.rank))
        self._await_release()
        self.channel.close()

    def _await_release(self) -> None:
        """Stay until the head's Release: a neighbour that has not yet seen its Shutdown
        would take this stage's exit for a lost link. A link failure means nothing now, but
        the head's: it will not release anyone."""
        deadline = time.monotonic() + RELEASE_WAIT_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                src, message = self.channel.inbox.get(timeout=min(left, self.heartbeat_s))
            except queue.Empty:
                if self.head_pid is not None and not _alive(self.head_pid):
                    return
                continue
            if isinstance(message, Release) or (isinstance(message, LinkFailure) and src == HEAD):
                return

    def _next(self) -> tuple[int, Any]:
        while True:
            try:
                return self.channel.inbox.get(timeout=self.heartbeat_s / 2)
            except queue.Empty:
                self._beat()
                if self.head_pid is not None and not _alive(self.head_pid):
                    raise PeerLost("the head process is gone") from None

    def _handle(self, message: Any) -> None:
        if isinstance(message, StageSetup):
            self._setup(message)
        elif isinstance(message, RunMessage):
            self._run(message)
        elif isinstance(message, LinkFailure):
            raise PeerLost(f"lost its link to {stage_name(message.peer)}: {message.text}")
        elif isinstance(message, EndSession):
            self._apply(message.ops)
            in_use = self.cache.allocator.num_blocks - self.cache.num_free_blocks
            self.cancelled.clear()
            self.channel.send(HEAD, SessionClosed(self.rank, in_use))
        else:
            raise RuntimeError(f"unexpected {type(message).__name__}")

    def _beat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= self.heartbeat_s:
            self.channel.send(HEAD, Heartbeat(self.rank))
            self._last_beat = now

    # ------------------------------------------------------------------ setup

    def _setup(self, setup: StageSetup) -> None:
        if setup.threads is not None:
            torch.set_num_threads(setup.threads)
        self.heartbeat_s = setup.heartbeat_s
        self.stage = load_stage(
            setup.checkpoint,
            range(setup.first_layer, setup.end_layer),
            first=False,
            last=setup.last,
            dtype=setup.dtype,
        )
        self.stage.use_kernels(setup.kernels)
        self.stage.layer_sleep_s = setup.layer_sleep_s
        self.cache = self.stage.new_cache(setup.num_blocks, setup.block_size)
        self.channel.emulate_link(setup.link_latency_s, setup.link_bytes_per_s)
        self.channel.send(HEAD, Ready(self.rank))

    # ------------------------------------------------------------------ runs

    def _run(self, message: RunMessage) -> None:
        self._apply(message.ops)
        started = time.perf_counter()
        out, status = None, "skipped"
        if message.hidden is not None and message.run_id not in self.cancelled:
            if message.fork is not None:
                self.cache.fork(message.fork[0], message.seq)
                self.cache.truncate(message.seq, message.fork[1])
            step = SeqStep(message.seq, message.tokens, message.parents)
            hidden = message.hidden.tensor(self.stage.weight().device)
            out = self.stage.run(
                self.cache, step, hidden, message.last_only, lambda: self._stop(message.run_id)
            )
            status = "computed" if out is not None else "aborted"
        times = [*message.times, StageTime(self.rank, time.perf_counter() - started, status)]
        if self.stage.last:
            choices = None if out is None else out.tolist()
            self.channel.send(HEAD, RunResult(message.run_id, choices, times))
            return
        hidden = None if out is None else Payload.of(out)
        forward = RunMessage(
            message.run_id, message.seq, message.tokens, message.parents, message.fork,
            message.last_only, ops=message.ops, hidden=hidden, times=times,
        )  # fmt: skip
        self.channel.send(self.rank + 1, forward)

    def _stop(self, run_id: int) -> bool:
        """Between layers: beat if due, and stop if the run was cancelled meanwhile."""
        self._beat()
        return run_id in self.cancelled

    def _apply(self, ops: list[KVOp]) -> None:
        for op in ops:
            if op.kind == "free":
                if op.seq in self.cache.tables:  # a stage that skipped a run never forked it
                    self.cache.free(op.seq)
            else:
                self.cache.keep(op.seq, op.start, list(op.offsets))

    def _on_cancel(self, src: int, message: Any) -> bool:
        """Receiver thread: note a cancel at once and pass it on towards stage 1."""
        if not isinstance(message, Cancel):
            return False
        self.cancelled.update(message.run_ids)
        if self.rank > 1:
            self.channel.send(self.rank - 1, message)
        return True


def _is_release(src: int, message: Any) -> bool:
    return isinstance(message, Release)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def run_local_stage(store_path: str, rank: int, world: int, head_pid: int) -> None:
    """Entry of a stage process the workbench started on this machine."""
    group = process_group(file_store(store_path, world), rank, world)
    serve_and_exit(StageWorker(group, rank, world, head_pid))


def serve_and_exit(worker: StageWorker) -> None:
    """Serve, then leave the process at once: the receiver threads still blocked on the
    other peers must not meet the group's destructors at interpreter exit."""
    code = 0
    try:
        worker.serve()
    except PeerLost as exc:
        print(f"pipeline stage {worker.rank} stops: {exc}", file=sys.stderr)
        code = LOST_PEER_EXIT
    except BaseException:
        traceback.print_exc()
        code = 1
    exit_now(code)
