"""Build the scenario's cost model: a registry keyed by `cost_model.kind`."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import ModelSpec, resolve_model
from simulator.cost_models.base import CostModel
from simulator.cost_models.fixed_step import FixedStepCostModel
from simulator.cost_models.roofline import RooflineCostModel
from simulator.cost_models.vidur import VidurProfileCostModel
from workbench.errors import WorkbenchError
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import (
    FixedStepCostConfig,
    RooflineCostConfig,
    VidurProfileCostConfig,
)


def _roofline(scenario: Scenario, model: ModelSpec) -> CostModel:
    cfg = scenario.cost_model
    assert isinstance(cfg, RooflineCostConfig)
    hw = scenario.hardware
    return RooflineCostModel(model, get_gpu(hw.gpu), hw.tensor_parallel, scenario.model.dtype, cfg)


def _vidur_profile(scenario: Scenario, model: ModelSpec) -> CostModel:
    cfg = scenario.cost_model
    assert isinstance(cfg, VidurProfileCostConfig)
    return VidurProfileCostModel(model, cfg, scenario.hardware.tensor_parallel)


def _fixed_step(scenario: Scenario, model: ModelSpec) -> CostModel:
    cfg = scenario.cost_model
    assert isinstance(cfg, FixedStepCostConfig)
    return FixedStepCostModel(cfg.step_ms)


COST_MODELS: MappingProxyType[str, Callable[[Scenario, ModelSpec], CostModel]] = MappingProxyType(
    {"roofline": _roofline, "vidur_profile": _vidur_profile, "fixed_step": _fixed_step}
)


def build_cost_model(scenario: Scenario) -> CostModel:
    """The cost model the scenario asks for, over its resolved model."""
    kind = scenario.cost_model.kind
    builder = COST_MODELS.get(kind)
    if builder is None:
        known = ", ".join(COST_MODELS)
        raise WorkbenchError(
            f"unknown cost model {kind!r} (known: {known})", field="cost_model.kind"
        )
    return builder(scenario, resolve_model(scenario.model))
