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
from collections.abc import Callable, Sequence

import torch.distributed as dist

from real_backend.pipeline.launch import Pipeline, attached_pipeline, closed, process_group
from real_backend.pipeline.transport import Channel
from real_backend.pipeline.worker import StageWorker, serve_and_exit

DEFAULT_TIMEOUT_S = 60.0  # until a scenario's decoder.pipeline.stage_timeout_s applies


def run_ranks(head: Callable[[], int]) -> int:
    """Join torchrun's ranks: rank 0 runs `head` with the other ranks as its stages, the
    others serve as stages until rank 0 is done. Returns this rank's exit code."""
    store, rank, world = next(dist.rendezvous("env://"))
    group = process_group(store, rank, world)
    if rank > 0:
        serve_and_exit(StageWorker(group, rank, world))
    channel = Channel(group, 0, range(1, world), is_final=closed)
    pipeline = Pipeline(channel, world, DEFAULT_TIMEOUT_S)
    try:
        with attached_pipeline(pipeline):
            return head()
    finally:
        pipeline.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """The workbench command line (the arguments after the module) on rank 0."""
    from workbench.cli import main as workbench_main

    args = list(sys.argv[1:] if argv is None else argv)
    return run_ranks(lambda: workbench_main(args))


if __name__ == "__main__":
    sys.exit(main())
