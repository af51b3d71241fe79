"""Pipeline stages across machines: every rank runs this module under `torchrun`.

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m real_backend.pipeline.torchrun_main run scenarios/pipeinfer_real.yaml --db r.duckdb

Rank 0 runs the workbench command line (the arguments after the module) as the head: the
runs in it that need `hardware.pipeline_parallel` = world size stages use these ranks
instead of spawning processes. Ranks 1.. serve as stages (`worker.StageWorker`, the same
loop a locally spawned stage runs) until rank 0 is done. The rendezvous is torchrun's
(`env://`); the stages then talk over their own gloo group.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

import torch.distributed as dist

from real_backend.pipeline.launch import (
    Pipeline,
    attached_pipeline,
    closed,
    exit_now,
    process_group,
)
from real_backend.pipeline.transport import Channel
from real_backend.pipeline.worker import StageWorker, serve_and_exit

DEFAULT_TIMEOUT_S = 60.0  # until a scenario's decoder.pipeline.stage_timeout_s applies


def run_ranks(head: Callable[[], int]) -> NoReturn:
    """Join torchrun's ranks: rank 0 runs `head` with the other ranks as its stages, the
    others serve as stages until rank 0 is done. Every rank leaves with its exit code."""
    store, rank, world = next(dist.rendezvous("env://"))
    group = process_group(store, rank, world)
    if rank > 0:
        serve_and_exit(StageWorker(group, rank, world))
    channel = Channel(group, 0, range(1, world), is_final=closed)
    exit_now(head_status(head, Pipeline(channel, world, DEFAULT_TIMEOUT_S)))


def head_status(head: Callable[[], int], pipeline: Pipeline) -> int:
    """Run `head` with the pipeline attached, then stop its stages: the exit status, whatever
    happened in either."""
    code = 1
    try:
        with attached_pipeline(pipeline):
            code = head()
    except SystemExit as exc:  # the command line's own exit, message already written
        code = exit_code(exc)
    except BaseException:
        traceback.print_exc()
    try:
        pipeline.shutdown()
    except BaseException:  # an interrupt while waiting for the stages: leave all the same
        traceback.print_exc()
        code = code or 1
    return code


def exit_code(exc: SystemExit) -> int:
    """The status `sys.exit(exc.code)` would leave with (a message: printed, then 1)."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The workbench command line (the arguments after the module) on rank 0."""
    from workbench.cli import main as workbench_main

    args = list(sys.argv[1:] if argv is None else argv)
    run_ranks(lambda: workbench_main(args))


if __name__ == "__main__":
    main()
