"""Simulate one scenario: workload → replicas (policy + cost model) → records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.capacity import (
    NO_SWAP,
    SwapSpace,
    check_tensor_parallel,
    kv_capacity_blocks,
    swap_space,
)
from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import ModelSpec, resolve_model
from simulator.cost_models.base import CostModel
from simulator.cost_models.factory import build_cost_model
from simulator.decoders.apar import AparBranches
from simulator.decoders.apar_trees import longest_branch
from simulator.decoders.factory import build_apar, build_steppers, draft_spec
from simulator.decoders.stepper import MultiTokenStepper
from simulator.engine import ProgressFn, RunMonitor, Simulation
from simulator.pipeline import StagePipeline, stage_pipeline
from workbench.errors import WorkbenchError
from workbench.plugins import load_predictor_plugin
from workbench.records import RunRecords
from workbench.scenario.decoders import PIPELINE_DECODER_KINDS, lookahead_slots
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import ContinuousBatchingConfig
from workbench.scheduling.factory import build_policy, check_feasible
from workbench.scheduling.length_predictors import with_predictions
from workbench.scheduling.routing import build_router
from workbench.scheduling.swap_space import swap_info
from workbench.workload.generate import workload_for
from workbench.workload.requests import Workload

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore


def replica_kv_blocks(scenario: Scenario) -> int:
    """KV blocks of one replica, derived from memory as real engines do (or given)."""
    sched = scenario.scheduler
    hw = scenario.hardware
    extra = {}
    if isinstance(sched, ContinuousBatchingConfig):  # its activation peak: one step's budget
        budget = sched.max_batched_tokens
        extra["max_batched_tokens"] = (
            min(budget, sched.chunk_size) if sched.chunked_prefill else budget
        )
    return kv_capacity_blocks(
        resolve_model(scenario.model),
        get_gpu(hw.gpu),
        hw.tensor_parallel,
        scenario.model.dtype,
        sched.kv_cache,
        draft=draft_spec(scenario),
        pipeline_parallel=hw.pipeline_parallel,
        **extra,
    )


def replica_swap_space(scenario: Scenario, model: ModelSpec) -> SwapSpace:
    """Host memory for swapped KV per engine, and what moving a block costs."""
    hw = scenario.hardware
    kv = scenario.scheduler.kv_cache
    return swap_space(model, get_gpu(hw.gpu), hw.tensor_parallel, scenario.model.dtype, kv)


@dataclass(frozen=True)
class Prepared:
    """Everything a simulation needs, built and checked before the clock starts."""

    workload: Workload
    num_blocks: int  # per engine: a replica's, or a pipelined replica's share per stage
    engines_per_replica: int  # pipeline stages (virtual engines), 1 without pipelining
    lookahead_slots: int
    cost_model: CostModel
    steppers: list[MultiTokenStepper] | None
    decoder_info: dict[str, str]
    apar: AparBranches | None = None  # APAR: the requests' trees
    swap: SwapSpace = NO_SWAP  # host memory for swapped KV per engine (APAR, no draft)


def prepare(
    scenario: Scenario, workload: Workload | None = None, store: ResultsStore | None = None
) -> Prepared:
    """Resolve, size and check the scenario: every refusal a run would give, none of the
    work (`check_scenario` calls this alone)."""
    model = resolve_model(scenario.model)
    check_tensor_parallel(model, scenario.hardware.tensor_parallel)
    engines = check_pipeline(scenario, model)
    workload = workload if workload is not None else workload_for(scenario)
    path = scenario.model.config_path  # a learned length predictor reads prompts with it
    checkpoint = None if path is None else (path if path.is_dir() else path.parent)
    load_predictor_plugin(scenario.scheduler)  # the learned one comes with the real backend
    workload = with_predictions(workload, scenario.scheduler, scenario.seed, checkpoint)
    num_blocks = replica_kv_blocks(scenario) // engines  # vLLM: each engine its share
    slots = lookahead_slots(scenario.decoder)
    swap = replica_swap_space(scenario, model) if slots == 0 else NO_SWAP
    apar, apar_info = build_apar(scenario, workload.output_tokens, store, swap.block_s)
    longest = int((workload.prompt_tokens + workload.output_tokens).max())
    if apar is not None:  # a branch's visible context: what it sees of its parent + its own
        prompts = workload.prompt_tokens.tolist()
        longest = max(longest_branch(t, p) for t, p in zip(apar.trees, prompts, strict=True))
    check_feasible(
        scenario.scheduler,
        num_blocks,
        int(workload.prompt_tokens.max()),
        longest,
        source=None,
        lookahead_slots=slots,
    )
    cost_model = build_cost_model(scenario, store)  # stateless: shared by the replicas
    steppers, decoder_info = build_steppers(
        scenario, scenario.hardware.replicas * engines, store, apar
    )
    decoder_info.update(apar_info)
    swap = swap if apar is not None else NO_SWAP
    return Prepared(
        workload, num_blocks, engines, slots, cost_model, steppers, decoder_info, apar, swap
    )


def check_scenario(scenario: Scenario, store: ResultsStore | None = None) -> None:
    """Every refusal a simulated run of the scenario would give, none of its work (`workbench
    validate`, a sweep's preflight): the batch-1 pipeline decoders have checks of their own."""
    if scenario.decoder.kind in PIPELINE_DECODER_KINDS:
        from simulator.pipeinfer.serve import prepare_pipeline

        prepare_pipeline(scenario, workload_for(scenario), store)
        return
    prepare(scenario, store=store)


def check_pipeline(scenario: Scenario, model: ModelSpec) -> int:
    """Pipeline stages per replica (each a virtual engine), checked against the model."""
    stages = scenario.hardware.pipeline_parallel
    if stages > 1 and scenario.decoder.kind == "apar":
        raise WorkbenchError(
            "the simulator models APAR without pipeline parallelism; set "
            "hardware.pipeline_parallel: 1",
            field="hardware.pipeline_parallel",
        )
    if stages > model.num_layers:
        raise WorkbenchError(
            f"{stages} pipeline stages for {model.name}'s {model.num_layers} layers",
            field="hardware.pipeline_parallel",
        )
    if stages > 1 and not isinstance(scenario.scheduler, ContinuousBatchingConfig):
        raise WorkbenchError(
            "pipeline parallelism is modelled for continuous batching (vLLM's virtual "
            "engines); use scheduler.kind: continuous",
            field="hardware.pipeline_parallel",
        )
    return stages


def simulate(
    scenario: Scenario,
    workload: Workload | None = None,
    progress: ProgressFn | None = None,
    store: ResultsStore | None = None,
    monitor: RunMonitor | None = None,
) -> RunRecords:
    """store: the results database, for a decoder calibrated from a stored run. monitor: may
    end the run early (its reason lands in `info["stopped_early"]`)."""
    if scenario.decoder.kind in PIPELINE_DECODER_KINDS:  # batch 1 through stages, its own model
        from simulator.pipeinfer.serve import simulate_pipeline

        return simulate_pipeline(scenario, workload or workload_for(scenario), store)
    ready = prepare(scenario, workload, store)
    replicas = scenario.hardware.replicas
    engines = replicas * ready.engines_per_replica
    branching = ready.apar is not None
    policies = [
        build_policy(
            scenario.scheduler,
            ready.num_blocks,
            ready.lookahead_slots,
            branching,
            ready.swap.blocks,
        )
        for _ in range(engines)
    ]
    sim = Simulation(
        ready.workload,
        policies,
        [ready.cost_model] * engines,
        build_router(scenario.routing.kind, ready.engines_per_replica),
        bulk_steps=scenario.simulator.bulk_steps,
        progress=progress,
        decoders=ready.steppers,
        monitor=monitor,
        pipelines=_pipelines(scenario, ready.engines_per_replica),
        apar=ready.apar,
    )
    records = sim.run()
    if sim.stop_reason is not None:
        records.info["stopped_early"] = sim.stop_reason
    if ready.workload.category is not None:
        records.requests.category = ready.workload.category
    info = {"kv_blocks_per_replica": str(ready.num_blocks), "replicas": str(replicas)}
    if ready.engines_per_replica > 1:  # records' replica column counts virtual engines
        info["pipeline_parallel"] = str(ready.engines_per_replica)
        info["kv_blocks_per_replica"] = str(ready.num_blocks * ready.engines_per_replica)
        info["kv_blocks_per_engine"] = str(ready.num_blocks)
    if ready.apar is not None:
        info.update(swap_info(policies))
    records.info.update(info)
    records.info.update(ready.decoder_info)
    return records


def _pipelines(scenario: Scenario, stages: int) -> list[StagePipeline | None] | None:
    """Per engine, its replica's stages (engines of one replica share them)."""
    if stages == 1:
        return None
    model, gpu = resolve_model(scenario.model), get_gpu(scenario.hardware.gpu)
    pipelines: list[StagePipeline | None] = []
    for _ in range(scenario.hardware.replicas):
        link = scenario.hardware.stage_link
        shared = stage_pipeline(model, gpu, stages, scenario.model.dtype, link)
        pipelines += [shared] * stages
    return pipelines
