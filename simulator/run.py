"""Simulate one scenario: workload → replicas (policy + cost model) → records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.capacity import kv_capacity_blocks
from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import resolve_model
from simulator.cost_models.factory import build_cost_model
from simulator.decoders.factory import build_steppers, draft_spec
from simulator.engine import ProgressFn, Simulation
from workbench.records import RunRecords
from workbench.scenario.decoders import lookahead_slots
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import ContinuousBatchingConfig
from workbench.scheduling.factory import build_policy, check_feasible
from workbench.scheduling.length_predictors import with_predictions
from workbench.scheduling.routing import build_router
from workbench.workload.generate import workload_for
from workbench.workload.requests import Workload

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore


def replica_kv_blocks(scenario: Scenario) -> int:
    """KV blocks of one replica, derived from memory as real engines do (or given)."""
    sched = scenario.scheduler
    hw = scenario.hardware
    max_tokens = sched.max_batched_tokens if isinstance(sched, ContinuousBatchingConfig) else None
    extra = {"max_batched_tokens": max_tokens} if max_tokens else {}
    return kv_capacity_blocks(
        resolve_model(scenario.model),
        get_gpu(hw.gpu),
        hw.tensor_parallel,
        scenario.model.dtype,
        sched.kv_cache,
        draft=draft_spec(scenario),
        **extra,
    )


def simulate(
    scenario: Scenario,
    workload: Workload | None = None,
    progress: ProgressFn | None = None,
    store: ResultsStore | None = None,
) -> RunRecords:
    """store: the results database, for a decoder calibrated from a stored run."""
    workload = workload if workload is not None else workload_for(scenario)
    path = scenario.model.config_path  # a learned length predictor reads prompts with it
    checkpoint = None if path is None else (path if path.is_dir() else path.parent)
    workload = with_predictions(workload, scenario.scheduler, scenario.seed, checkpoint)
    num_blocks = replica_kv_blocks(scenario)
    slots = lookahead_slots(scenario.decoder)
    check_feasible(
        scenario.scheduler,
        num_blocks,
        int(workload.prompt_tokens.max()),
        int((workload.prompt_tokens + workload.output_tokens).max()),
        source=None,
        lookahead_slots=slots,
    )
    replicas = scenario.hardware.replicas
    cost_model = build_cost_model(scenario)  # stateless: shared by the replicas
    steppers, decoder_info = build_steppers(scenario, replicas, store)
    sim = Simulation(
        workload,
        [build_policy(scenario.scheduler, num_blocks, slots) for _ in range(replicas)],
        [cost_model] * replicas,
        build_router(scenario.routing.kind),
        bulk_steps=scenario.simulator.bulk_steps,
        progress=progress,
        decoders=steppers,
    )
    records = sim.run()
    if workload.category is not None:
        records.requests.category = workload.category
    records.info.update({"kv_blocks_per_replica": str(num_blocks), "replicas": str(replicas)})
    records.info.update(decoder_info)
    return records
