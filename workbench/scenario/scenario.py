"""The scenario: everything one run needs, validated, with every default filled in."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import Field

from workbench.scenario.base import MAX_SEED, StrictModel
from workbench.scenario.plan import PlanConfig
from workbench.scenario.system import (
    ClusterConfig,
    CostModelConfig,
    DecoderConfig,
    ModelConfig,
    RooflineCostConfig,
    RoutingConfig,
    SchedulerConfig,
    SimulatorConfig,
    SLOConfig,
    VanillaDecoderConfig,
)
from workbench.scenario.workload import WorkloadConfig


class SweepConfig(StrictModel):
    """A grid over dotted scenario paths, run point by point (resumable)."""

    grid: dict[str, list[Any]] = Field(
        description="Dotted path → values, e.g. {workload.arrival.rate_per_s: [1, 2, 4]}; "
        "the sweep runs the cartesian product."
    )


class Scenario(StrictModel):
    name: str = Field(description="A short name for this scenario, used in reports.")
    seed: int = Field(
        default=0,
        ge=0,
        le=MAX_SEED,
        description="Root seed: fixes the request stream (stored as a 64-bit integer).",
    )
    workload: WorkloadConfig = Field(description="The request stream.")
    model: ModelConfig = Field(description="The served model.")
    hardware: ClusterConfig = Field(description="GPU kind, replicas and tensor parallelism.")
    cost_model: CostModelConfig = Field(
        default_factory=lambda: RooflineCostConfig(kind="roofline"),
        description="How the simulator prices an engine step.",
    )
    scheduler: SchedulerConfig = Field(description="Batching and admission policy.")
    decoder: DecoderConfig = Field(
        default_factory=lambda: VanillaDecoderConfig(kind="vanilla"),
        description="Decoding algorithm.",
    )
    routing: RoutingConfig = Field(
        default_factory=RoutingConfig, description="Global routing across replicas."
    )
    backend: Literal["sim", "real"] = Field(
        default="sim", description="Where to run: the simulator or a real model."
    )
    slo: SLOConfig = Field(default_factory=SLOConfig, description="Latency limits for goodput.")
    simulator: SimulatorConfig = Field(
        default_factory=SimulatorConfig, description="Simulator engine options."
    )
    sweep: SweepConfig | None = Field(default=None, description="Optional grid of variants.")
    plan: PlanConfig | None = Field(
        default=None, description="`workbench plan`: SLOs, a search space and an objective."
    )

    def draw_seed(self) -> int:
        """The seed of the simulator's own draws: `simulator.draw_seed`, else the root seed."""
        drawn = self.simulator.draw_seed
        return self.seed if drawn is None else drawn

    def config_json(self) -> str:
        """Canonical JSON of the effective scenario (stable key order)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def config_hash(self) -> str:
        return hashlib.sha256(self.config_json().encode()).hexdigest()[:16]
