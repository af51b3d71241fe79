"""Simulate one scenario: workload → replicas (policy + cost model) → records."""

from __future__ import annotations

from simulator.capacity import kv_capacity_blocks
from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import resolve_model
from simulator.cost_models.factory import build_cost_model
from simulator.engine import ProgressFn, Simulation
from workbench.records import RunRecords
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import ContinuousBatchingConfig
from workbench.scheduling.factory import build_policy, check_feasible
from workbench.scheduling.routing import build_router
from workbench.workload.generate import generate_workload
from workbench.workload.requests import Workload


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
        **extra,
    )


def simulate(
    scenario: Scenario, workload: Workload | None = None, progress: ProgressFn | None = None
) -> RunRecords:
    workload = (
        workload if workload is not None else generate_workload(scenario.workload, scenario.seed)
    )
    num_blocks = replica_kv_blocks(scenario)
    check_feasible(
        scenario.scheduler,
        num_blocks,
        int(workload.prompt_tokens.max()),
        int((workload.prompt_tokens + workload.output_tokens).max()),
        source=None,
    )
    replicas = scenario.hardware.replicas
    cost_model = build_cost_model(scenario)  # stateless: shared by the replicas
    sim = Simulation(
        workload,
        [build_policy(scenario.scheduler, num_blocks) for _ in range(replicas)],
        [cost_model] * replicas,
        build_router(scenario.routing.kind),
        bulk_steps=scenario.simulator.bulk_steps,
        progress=progress,
    )
    records = sim.run()
    records.info.update({"kv_blocks_per_replica": str(num_blocks), "replicas": str(replicas)})
    return records
