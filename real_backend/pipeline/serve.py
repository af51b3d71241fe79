"""Serve a scenario through pipeline stages: `decoder.kind: pipeline | pipeinfer`.

One request at a time, in arrival order (batch 1, PipeInfer's setting): the request waits
for its arrival and for the one before it, its prompt runs through the stages as one run,
then the decoding policy (`decoding.py`) commits its tokens. Records are the engine's: a
step per commit, emission spans, requests; `info["pipeline_runs"]` lists every run.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from kernels.dispatch import KernelChoice, KernelUnavailable, select_kernels
from real_backend.model.config import ModelArgs
from real_backend.model.loading import load_checkpoint
from real_backend.outputs import output_records, with_text
from real_backend.pipeline.decoding import PipelineDecoding
from real_backend.pipeline.drafting import DraftSource, ModelDrafter
from real_backend.pipeline.head import PipelineHead
from real_backend.pipeline.launch import is_attached, open_pipeline
from real_backend.pipeline.messages import StageSetup
from real_backend.pipeline.records import PipelineRecorder
from real_backend.pipeline.run_log import RunLog
from real_backend.pipeline.stage_model import layer_ranges, load_stage
from real_backend.preflight import checkpoint_folder
from real_backend.prompts import request_prompts
from real_backend.serve import (
    check_context,
    eos_token_ids,
    run_info,
    stop_token_ids,
)
from workbench.errors import WorkbenchError
from workbench.records import RunRecords
from workbench.scenario.decoders import (
    PipeInferDecoderConfig,
    PipelineDecoderConfig,
    PipelineOptions,
)
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import ContinuousBatchingConfig
from workbench.scheduling.blocks import blocks_for
from workbench.workload.generate import workload_for
from workbench.workload.requests import Workload

DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
PipelineConfig = PipelineDecoderConfig | PipeInferDecoderConfig


@dataclass
class StagePlan:
    """What every stage loads and how it runs: the same for the head and the workers."""

    checkpoint: Path
    dtype: str  # a key of loading.DTYPES
    kernels: str
    ranges: list[range]
    num_blocks: int
    block_size: int
    options: PipelineOptions
    threads: int | None

    def setup(self, rank: int) -> StageSetup:
        link = self.options.emulated_link
        latency = 0.0 if link is None else link.latency_ms / 1000
        rate = (
            None if link is None or link.bandwidth_gbps is None else link.bandwidth_gbps * 1e9 / 8
        )
        return StageSetup(
            checkpoint=str(self.checkpoint),
            first_layer=self.ranges[rank].start,
            end_layer=self.ranges[rank].stop,
            last=rank == len(self.ranges) - 1,
            dtype=self.dtype,
            kernels=self.kernels,
            num_blocks=self.num_blocks,
            block_size=self.block_size,
            threads=self.threads,
            link_latency_s=latency,
            link_bytes_per_s=rate,
            layer_sleep_s=self.options.emulated_layer_ms / 1000,
            heartbeat_s=min(1.0, self.options.stage_timeout_s / 4),
        )


@contextlib.contextmanager
def running_pipeline(plan: StagePlan) -> Iterator[PipelineHead]:
    """The stages started and loaded; the head (this process, with the stages' torch
    threads meanwhile) holds stage 0. At the end every stage checks it holds no KV."""
    stages = len(plan.ranges)
    with (
        _torch_threads(plan.threads),
        open_pipeline(stages, plan.options.stage_timeout_s) as pipeline,
    ):
        if pipeline is not None:
            pipeline.setup({rank: plan.setup(rank) for rank in range(1, stages)})
        setup = plan.setup(0)
        stage = load_stage(plan.checkpoint, plan.ranges[0], True, stages == 1, plan.dtype)
        stage.use_kernels(plan.kernels)
        stage.layer_sleep_s = setup.layer_sleep_s
        head = PipelineHead(stage, stage.new_cache(plan.num_blocks, plan.block_size), pipeline)
        if pipeline is not None:
            pipeline.channel.emulate_link(setup.link_latency_s, setup.link_bytes_per_s)
        yield head
        head.end_session()


def serve_requests(
    head: PipelineHead,
    decoding: PipelineDecoding,
    workload: Workload,
    prompts: list[list[int]],
    stops: frozenset[int],
    clock: Callable[[], float],
    progress: Callable[[int], None] | None = None,
) -> RunRecords:
    """Serve every request, one at a time in arrival order; times from the clock's zero."""
    recorder = PipelineRecorder(len(workload))
    outputs: dict[int, list[int]] = {}
    finished: list[float] = []
    origin = decoding.log.origin_s
    for rid in range(len(workload)):
        arrival = _arrival_s(workload, rid, finished)
        time.sleep(max(0.0, arrival - (clock() - origin)))
        started = clock() - origin
        commits = decoding.generate(rid, prompts[rid], int(workload.output_tokens[rid]), stops)
        for commit in commits:
            commit.time_s -= origin
        recorder.request(rid, arrival, started, commits)
        outputs[rid] = [token for commit in commits for token in commit.tokens]
        finished.append(commits[-1].time_s)
        if progress is not None:
            progress(1)
    decoding.drain()
    records = recorder.records(workload.prompt_tokens)
    records.outputs = output_records(outputs, None)  # the caller adds the text
    return records


def _arrival_s(workload: Workload, rid: int, finished: list[float]) -> float:
    """Open loop: the drawn time. Closed loop: a client sends its next request when its
    previous one ends (plus the think time); requests go to clients in order."""
    if not workload.is_closed_loop:
        return float(workload.arrival_s[rid])
    clients = workload.closed_loop_concurrency or 1
    return 0.0 if rid < clients else finished[rid - clients] + workload.think_time_s


# ---------------------------------------------------------------------- the scenario


def serve_pipeline(scenario: Scenario, progress: Callable[[int], None] | None = None) -> RunRecords:
    decoder: PipelineConfig = scenario.decoder
    check_pipeline_scenario(scenario)
    folder = checkpoint_folder(scenario)
    eos = eos_token_ids(folder)
    stops = stop_token_ids(folder, scenario.workload.stop_texts) | eos
    workload = workload_for(scenario)
    args = ModelArgs.from_folder(folder)
    check_context(workload, args, scenario)
    stages = scenario.hardware.pipeline_parallel
    plan = StagePlan(
        checkpoint=folder,
        dtype=DTYPE_NAMES[scenario.model.dtype],
        kernels=scenario.model.kernels,
        ranges=layer_ranges(args.n_layers, stages, decoder.pipeline.layer_split),
        num_blocks=pipeline_kv_blocks(scenario, workload),
        block_size=scenario.scheduler.kv_cache.block_size,
        options=decoder.pipeline,
        threads=decoder.pipeline.threads_per_stage or default_threads(stages),
    )
    prompts = request_prompts(workload, args.vocab_size, scenario.seed, eos)
    kernels = cpu_kernels(scenario.model.kernels)
    with running_pipeline(plan) as head:
        drafter = (
            load_drafter(scenario, head, args, plan)
            if isinstance(decoder, PipeInferDecoderConfig)
            else None
        )
        origin = time.perf_counter()
        log = RunLog(stages, origin)
        decoding = PipelineDecoding(
            head, decoder, drafter, log, time.perf_counter, scenario.workload.ignore_eos
        )
        records = serve_requests(
            head, decoding, workload, prompts, stops, time.perf_counter, progress
        )
    assert records.outputs is not None
    records.outputs = with_text(records.outputs, folder)
    records.info.update(run_info(folder, "cpu", scenario.model.dtype, plan.num_blocks))
    records.info.update(pipeline_info(plan, log, decoding))
    records.info["kernels"] = kernels
    if workload.category is not None:
        records.requests.category = workload.category
    return records


def cpu_kernels(choice: KernelChoice) -> str:
    """The kernel implementation the stages will run, refused now if it cannot."""
    try:
        return select_kernels(choice, torch.device("cpu")).name
    except KernelUnavailable as e:
        raise WorkbenchError(str(e), field="model.kernels") from e


def default_threads(stages: int) -> int | None:
    """Stages spawned here share this machine's cores; under torchrun each process keeps
    its own setting (torchrun's OMP_NUM_THREADS)."""
    return None if is_attached() else max(1, (os.cpu_count() or 1) // stages)


def pipeline_info(plan: StagePlan, log: RunLog, decoding: PipelineDecoding) -> dict[str, str]:
    link = plan.options.emulated_link
    return {
        "pipeline_stages": str(len(plan.ranges)),
        "pipeline_layers": json.dumps([[r.start, r.stop] for r in plan.ranges]),
        "pipeline_emulated_link": "none" if link is None else link.model_dump_json(),
        "pipeline_emulated_layer_ms": str(plan.options.emulated_layer_ms),
        "pipeline_threads_per_stage": str(plan.threads),
        "pipeline_draft_s": f"{decoding.draft_s:.6f}",
        "pipeline_empty_drafts": str(decoding.empty_drafts),
        "pipeline_runs": log.info(),
    }


def check_pipeline_scenario(scenario: Scenario) -> None:
    """Refuse, in one line, what the pipeline server does not run."""
    if scenario.hardware.gpu != "cpu":
        raise WorkbenchError(
            "pipeline stages run on the CPU over gloo; stages on CUDA (NCCL) are not built yet: "
            "set hardware.gpu: cpu",
            field="hardware.gpu",
        )
    sched = scenario.scheduler
    if not isinstance(sched, ContinuousBatchingConfig) or sched.max_batch_size != 1:
        raise WorkbenchError(
            "pipeline decoders serve one request at a time (batch 1, PipeInfer's setting): use "
            "scheduler kind continuous with max_batch_size: 1",
            field="scheduler.max_batch_size",
        )


def pipeline_kv_blocks(scenario: Scenario, workload: Workload) -> int:
    """Each stage's blocks: the scenario's, else the longest request plus every run in
    flight: a chain of speculative runs beyond it, and each run's own last blocks."""
    sched = scenario.scheduler
    decoder = scenario.decoder
    bs = sched.kv_cache.block_size
    longest = int((workload.prompt_tokens + workload.output_tokens).max())
    if isinstance(decoder, PipeInferDecoderConfig):
        runs, nodes = decoder.max_runs_in_flight + 2, decoder.max_draft_tokens + 1
    else:
        runs, nodes = 2, 1
    needed = blocks_for(longest + runs * nodes, bs) + runs * (nodes // bs + 3)
    if sched.kv_cache.num_blocks is None:
        return needed
    minimum = blocks_for(longest, bs) + 2 * (nodes // bs + 3)
    if sched.kv_cache.num_blocks < minimum:
        raise WorkbenchError(
            f"{sched.kv_cache.num_blocks} KV blocks cannot hold the longest request ({longest} "
            f"tokens) and a run beside it: give at least {minimum}",
            field="scheduler.kv_cache.num_blocks",
        )
    return sched.kv_cache.num_blocks


def load_drafter(
    scenario: Scenario, head: PipelineHead, args: ModelArgs, plan: StagePlan
) -> DraftSource:
    """The draft model on the head, with its own cache; it must share the vocabulary."""
    folder = draft_folder(scenario)
    draft = load_checkpoint(folder, plan.dtype, head.stage.weight().device)
    draft.use_kernels(scenario.model.kernels)
    if draft.args.vocab_size != args.vocab_size:
        raise WorkbenchError(
            f"the draft in {folder} has a vocabulary of {draft.args.vocab_size} tokens, the "
            f"target {args.vocab_size}: a draft must share the target's tokenizer",
            field="decoder.draft",
        )
    return ModelDrafter(draft, plan.num_blocks, plan.block_size)


def draft_folder(scenario: Scenario) -> Path:
    """`decoder.draft`'s checkpoint folder: its config_path, else its zoo pair's draft (the
    target's pair by default)."""
    from real_backend.zoo.build import resolve_zoo_model

    draft = scenario.decoder.draft
    if draft.config_path is not None:
        return draft.config_path if draft.config_path.is_dir() else draft.config_path.parent
    pair = draft.zoo or scenario.model.zoo
    if pair is None:
        raise WorkbenchError(
            "pipeinfer needs a draft model: give decoder.draft.zoo or decoder.draft.config_path",
            field="decoder.draft",
        )
    return resolve_zoo_model(pair, "draft", scenario.model.zoo_dir)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """This process's torch threads while it is the head; restored afterwards."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
