"""Starting the stage processes and watching them: the head's `Pipeline`.

On one machine the workbench starts ranks 1..P-1 itself (`local_pipeline`, from a fork
server; a file store in a temporary folder is the rendezvous, so no port is picked).
Across machines `torchrun` starts every rank (`torchrun_main.py`) and rank 0 attaches its
group here (`attached_pipeline`); both give the head the same `Pipeline` and run the same
worker loop (`worker.py`).

A stage that dies or falls silent fails the run with one line naming it: the head checks
the spawned processes' exit codes, and every stage sends a heartbeat at least every
`heartbeat_s` (from its main loop, so a hung stage stops sending them).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, NoReturn

import torch.distributed as dist
import torch.multiprocessing as mp

from real_backend.pipeline.messages import (
    Closed,
    EndSession,
    Heartbeat,
    LinkFailure,
    Ready,
    Release,
    RunResult,
    SessionClosed,
    Shutdown,
    StageError,
    StageSetup,
)
from real_backend.pipeline.transport import Channel
from workbench.errors import WorkbenchError

# Waits inside the group never time out (gloo closes the pair when one does): a week.
GROUP_TIMEOUT = datetime.timedelta(days=7)
STORE_PREFIX = "workbench-pipeline"
LOST_PEER_EXIT = 3  # a stage that stopped because a peer went away (worker.PeerLost)
LAST_WORDS_S = 0.5  # how long a failed stage's own report is awaited after its exit
POLL_S = 0.05  # how often a blocked head looks at the stages' health
CLOSE_WAIT_S = 10.0  # how long a shutdown waits for the workers' Closed
RELEASE_WAIT_S = 2 * CLOSE_WAIT_S  # a worker's wait for Release: longer, so none leaves early
CONNECT_GRACE_S = 120.0  # spawned stages import torch before they connect


def exit_now(code: int) -> NoReturn:
    """Leave the process at once, its output flushed: the receiver threads still blocked on
    peers that left must not meet the group's destructors at interpreter exit (which
    aborts the process now and then: `terminate called without an active exception`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def process_group(store: dist.Store, rank: int, world: int) -> dist.ProcessGroup:
    """The stages' gloo group over `store` (no global default group is created)."""
    return dist.ProcessGroupGloo(dist.PrefixStore(STORE_PREFIX, store), rank, world, GROUP_TIMEOUT)


def file_store(path: str, world: int) -> dist.Store:
    return dist.FileStore(path, world)


def stage_name(rank: int) -> str:
    return f"pipeline stage {rank}" + (" (the head)" if rank == 0 else "")


class Pipeline:
    """The head's link to ranks 1..world-1: messages, sessions, health."""

    def __init__(
        self,
        channel: Channel,
        world: int,
        timeout_s: float,
        processes: dict[int, BaseProcess] | None = None,
    ) -> None:
        self.channel = channel
        self.world = world
        self.timeout_s = timeout_s
        self.processes = processes or {}
        self.heard = {rank: time.monotonic() for rank in range(1, world)}
        self.healthy = True

    def send(self, rank: int, message: Any) -> None:
        self.channel.send(rank, message)

    # ------------------------------------------------------------------ sessions

    def setup(self, setups: dict[int, StageSetup]) -> None:
        """Every worker loads its layers; returns when all are ready."""
        self.heard = {rank: time.monotonic() for rank in range(1, self.world)}
        self.healthy = True
        for rank, setup in setups.items():
            self.send(rank, setup)
        waiting = set(setups)
        while waiting:
            src, message = self._receive(deadline=None)
            if isinstance(message, Ready):
                waiting.discard(src)
            else:
                raise RuntimeError(f"stage {src} sent {type(message).__name__} before it was ready")

    def end_session(self, ops: list) -> None:
        """Every worker applies the last operations and reports blocks still in use."""
        for rank in range(1, self.world):
            self.send(rank, EndSession(ops))
        waiting = set(range(1, self.world))
        while waiting:
            src, message = self._receive(deadline=None)
            if not isinstance(message, SessionClosed):
                raise RuntimeError(f"stage {src} sent {type(message).__name__} at the session end")
            if message.blocks_in_use:
                raise RuntimeError(
                    f"stage {src} still holds {message.blocks_in_use} KV blocks after the session"
                )
            waiting.discard(src)

    def next_result(self, block: bool) -> RunResult | None:
        """A run's result from the last stage, if one is there (waiting for it if `block`)."""
        message = self._receive(deadline=None if block else time.monotonic())
        if message is None:
            return None
        src, body = message
        if not isinstance(body, RunResult):
            raise RuntimeError(f"stage {src} sent an unexpected {type(body).__name__}")
        return body

    # ------------------------------------------------------------------ health

    def _receive(self, deadline: float | None) -> tuple[int, Any] | None:
        """The next message from a worker (heartbeats are noted, failures raised); None
        once `deadline` (monotonic) passes."""
        while True:
            wait = (
                POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            )
            try:
                src, message = (
                    self.channel.inbox.get(timeout=wait)
                    if wait
                    else self.channel.inbox.get_nowait()
                )
            except queue.Empty:
                self.check()
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            self.heard[src] = time.monotonic()
            if isinstance(message, Heartbeat):
                continue
            if isinstance(message, StageError | LinkFailure):
                self._fail_from(src, message)
            return src, message

    def check(self) -> None:
        """Raise a one-line WorkbenchError if a stage died or fell silent."""
        exited = {r: p for r, p in self.processes.items() if p.exitcode is not None}
        if exited:  # name a stage that failed first-hand before those that lost it
            self.healthy = False
            self._raise_last_words()
            rank = min(exited, key=lambda r: (exited[r].exitcode == LOST_PEER_EXIT, r))
            process = exited[rank]
            raise WorkbenchError(
                f"{stage_name(rank)} (pid {process.pid}) died with exit code {process.exitcode}",
                field="hardware.pipeline_parallel",
            )
        now = time.monotonic()
        for rank, heard in self.heard.items():
            if now - heard > self.timeout_s:
                self.healthy = False
                raise WorkbenchError(
                    f"{stage_name(rank)} sent nothing for {now - heard:.0f} s (stage_timeout_s "
                    f"{self.timeout_s:g}): it hung or its link is down",
                    field="decoder.pipeline.stage_timeout_s",
                )

    def _raise_last_words(self) -> None:
        """A stage that fails says why before it exits; its message may still be on its way
        to the inbox when its exit is seen: wait a little for a first-hand report."""
        deadline = time.monotonic() + LAST_WORDS_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                _src, message = self.channel.inbox.get(timeout=left)
            except queue.Empty:
                return
            if isinstance(message, StageError) and not message.lost_peer:
                raise WorkbenchError(f"{stage_name(message.rank)} failed: {message.text}")

    def _fail_from(self, src: int, message: StageError | LinkFailure) -> None:
        """A failure was reported. A stage that failed first-hand says how; one that lost a
        peer (or a link the head lost) points to another stage, which likely died: name
        that one if it shows up within a second."""
        self.healthy = False
        if isinstance(message, StageError) and not message.lost_peer:
            raise WorkbenchError(f"{stage_name(message.rank)} failed: {message.text}")
        grace = time.monotonic() + 1.0
        while self.processes and time.monotonic() < grace:
            self.check()  # raises naming a stage that exited, first-hand failures first
            time.sleep(POLL_S)
        if isinstance(message, StageError):
            raise WorkbenchError(f"{stage_name(message.rank)} stopped: {message.text}")
        raise WorkbenchError(
            f"the link between the head and {stage_name(message.peer)} failed: {message.text}"
        )

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Stop the workers: politely when healthy, else by signal."""
        if self.healthy:
            with contextlib.suppress(WorkbenchError, RuntimeError):
                self._stop_politely()
        for process in self.processes.values():
            process.join(timeout=2.0 if self.healthy else 0.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=5.0)

    def _stop_politely(self) -> None:
        """Shutdown to every worker; once all have closed, Release: none exits while a
        neighbour still serves."""
        for rank in range(1, self.world):
            self.send(rank, Shutdown())
        self.channel.flush()
        closed: set[int] = set()
        try:
            self._await_closed(closed)
        finally:  # those that closed are released even when another failed
            for rank in closed:
                self.send(rank, Release())
            self.channel.flush()

    def _await_closed(self, closed: set[int]) -> None:
        deadline = time.monotonic() + CLOSE_WAIT_S
        while len(closed) < self.world - 1:
            message = self._receive(deadline=deadline)
            if message is None:
                return
            if isinstance(message[1], Closed):
                closed.add(message[0])
                self.heard.pop(message[0], None)  # silent from now on, and rightly so


def closed(src: int, message: Any) -> bool:
    """A worker's last message: the head stops listening to it."""
    return isinstance(message, Closed)


# ---------------------------------------------------------------------- launchers

_attached: Pipeline | None = None


@contextlib.contextmanager
def attached_pipeline(pipeline: Pipeline) -> Iterator[None]:
    """Make runs in this process use `pipeline` (torchrun's ranks) instead of spawning."""
    global _attached
    _attached, previous = pipeline, _attached
    try:
        yield
    finally:
        _attached = previous


def is_attached() -> bool:
    """Whether this process is rank 0 of stages torchrun started."""
    return _attached is not None


@contextlib.contextmanager
def open_pipeline(world: int, timeout_s: float) -> Iterator[Pipeline | None]:
    """The workers of a `world`-stage pipeline (None for one stage: the head is all)."""
    if world == 1:
        yield None
        return
    if _attached is not None:
        if _attached.world != world:
            raise WorkbenchError(
                f"torchrun started {_attached.world} processes but the scenario has "
                f"{world} pipeline stages",
                field="hardware.pipeline_parallel",
            )
        _attached.timeout_s = timeout_s
        yield _attached
        return
    with local_pipeline(world, timeout_s) as pipeline:
        yield pipeline


@contextlib.contextmanager
def local_pipeline(world: int, timeout_s: float) -> Iterator[Pipeline]:
    """Spawn ranks 1..world-1 on this machine; this process is rank 0."""
    from real_backend.pipeline.worker import run_local_stage

    with tempfile.TemporaryDirectory(prefix="pipeline-") as folder:
        store_path = str(Path(folder) / "store")
        context = _stage_context()
        processes = {
            rank: context.Process(
                target=run_local_stage,
                args=(store_path, rank, world, os.getpid()),
                name=f"pipeline-stage-{rank}",
                daemon=True,
            )
            for rank in range(1, world)
        }
        for process in processes.values():
            process.start()
        pipeline = None
        try:
            group = _connect(store_path, world, processes)
            channel = Channel(group, 0, range(1, world), is_final=closed)
            pipeline = Pipeline(channel, world, timeout_s, processes)
            yield pipeline
        finally:
            if pipeline is not None:
                pipeline.shutdown()
            else:
                for process in processes.values():
                    process.kill()


def _stage_context() -> mp.context.BaseContext:
    """Stage processes fork from a server process that imported torch and the stage code
    once (importing torch is most of a stage's start); never from this process, whose
    threads a fork would not carry."""
    context = mp.get_context("forkserver")
    # Loading a stage builds modules on the meta device, which imports torch._dynamo: one
    # more second per stage unless the server imported it already.
    context.set_forkserver_preload(["real_backend.pipeline.worker", "torch._dynamo"])
    return context


def _connect(store_path: str, world: int, processes: dict[int, BaseProcess]) -> dist.ProcessGroup:
    """Rank 0's group, built beside a watch on the spawned stages (one that dies before it
    connects would leave the rendezvous waiting)."""
    built: list[dist.ProcessGroup | BaseException] = []

    def build() -> None:
        try:
            built.append(process_group(file_store(store_path, world), 0, world))
        except BaseException as exc:
            built.append(exc)

    thread = threading.Thread(target=build, name="pipeline-connect", daemon=True)
    thread.start()
    deadline = time.monotonic() + CONNECT_GRACE_S
    while thread.is_alive():
        thread.join(POLL_S)
        for rank, process in processes.items():
            if process.exitcode is not None:
                raise WorkbenchError(
                    f"{stage_name(rank)} (pid {process.pid}) exited with code "
                    f"{process.exitcode} before it connected",
                    field="hardware.pipeline_parallel",
                )
        if time.monotonic() > deadline:
            raise WorkbenchError(
                f"the pipeline stages did not connect within {CONNECT_GRACE_S:g} s",
                field="hardware.pipeline_parallel",
            )
    if isinstance(built[0], BaseException):
        raise WorkbenchError(f"the pipeline stages could not connect: {built[0]}")
    return built[0]
