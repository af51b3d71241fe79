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
from collections.abc import Sequence

import torch.distributed as dist

from real_backend.pipeline.launch import Pipeline, attached_pipeline, closed, process_group
from real_backend.pipeline.transport import Channel
from real_backend.pipeline.worker import StageWorker

DEFAULT_TIMEOUT_S = 60.0  # until a scenario's decoder.pipeline.stage_timeout_s applies


def main(argv: Sequence[str] | None = None) -> int:
    store, rank, world = next(dist.rendezvous("env://"))
    group = process_group(store, rank, world)
    if rank > 0:
        StageWorker(group, rank, world).serve()
        return 0
    from workbench.cli import main as workbench_main

    pipeline = Pipeline(
        Channel(group, 0, range(1, world), is_final=closed), world, DEFAULT_TIMEOUT_S
    )
    try:
        with attached_pipeline(pipeline):
            return workbench_main(list(sys.argv[1:] if argv is None else argv))
    finally:
        pipeline.shutdown()


if __name__ == "__main__":
    sys.exit(main())
