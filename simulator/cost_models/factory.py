"""Build the scenario's cost model: a registry keyed by `cost_model.kind`."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Optional

from simulator.catalogs.hardware import GPU_CATALOG, GPUSpec, get_gpu
from simulator.catalogs.kernel_fit import KernelFit
from simulator.catalogs.models import ModelSpec, resolve_model
from simulator.cost_models.base import CostModel
from simulator.cost_models.calibrated import build_calibrated
from simulator.cost_models.fitted import FittedCostModel
from simulator.cost_models.fixed_step import FixedStepCostModel
from simulator.cost_models.roofline import RooflineCostModel
from simulator.cost_models.vidur import VidurProfileCostModel
from workbench.errors import WorkbenchError
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import (
    FittedCostConfig,
    FixedStepCostConfig,
    RooflineCostConfig,
    VidurProfileCostConfig,
)

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore

Store = Optional["ResultsStore"]  # a calibrated model reads its profile from the store
FITTED_DTYPES = ("fp16", "bf16")  # the profiles measured 16-bit kernels


def _roofline(scenario: Scenario, model: ModelSpec, _store: Store = None) -> CostModel:
    cfg = scenario.cost_model
    assert isinstance(cfg, RooflineCostConfig)
    hw = scenario.hardware
    return RooflineCostModel(model, get_gpu(hw.gpu), hw.tensor_parallel, scenario.model.dtype, cfg)


def _vidur_profile(scenario: Scenario, model: ModelSpec, _store: Store = None) -> CostModel:
    cfg = scenario.cost_model
    assert isinstance(cfg, VidurProfileCostConfig)
    return VidurProfileCostModel(model, cfg, scenario.hardware.tensor_parallel)


def _fixed_step(scenario: Scenario, model: ModelSpec, _store: Store = None) -> CostModel:
    cfg = scenario.cost_model
    assert isinstance(cfg, FixedStepCostConfig)
    return FixedStepCostModel(cfg.step_ms)


def _fitted(scenario: Scenario, model: ModelSpec, _store: Store = None) -> CostModel:
    cfg = scenario.cost_model
    assert isinstance(cfg, FittedCostConfig)
    hw = scenario.hardware
    dtype = scenario.model.dtype
    if dtype not in FITTED_DTYPES:
        raise WorkbenchError(
            f"the kernel fits measured 16-bit kernels ({', '.join(FITTED_DTYPES)}), not "
            f"{dtype}: use cost_model.kind: roofline",
            field="model.dtype",
        )
    gpu = get_gpu(hw.gpu)
    fit = kernel_fit_for(cfg, gpu)
    return FittedCostModel(model, gpu, fit, hw.tensor_parallel, dtype, cfg)


def kernel_fit_for(cfg: FittedCostConfig, gpu: GPUSpec) -> KernelFit:
    """The user's fit (`fit_path`, made for this GPU) or the catalog's; never a default."""
    if cfg.fit_path is not None:
        fit = KernelFit.from_json(cfg.fit_path)
        if fit.gpu != gpu.name:
            raise WorkbenchError(
                f"the fit was made for {fit.gpu!r}, the scenario runs on {gpu.name!r}",
                source=str(cfg.fit_path),
                field="cost_model.fit_path",
            )
        return fit
    if gpu.kernel_fit is None:
        fitted = ", ".join(name for name, spec in GPU_CATALOG.items() if spec.kernel_fit)
        raise WorkbenchError(
            f"GPU {gpu.name!r} has no fitted kernel parameters (catalog GPUs with them: "
            f"{fitted}); fit its profiles with `workbench fit-cost-model` and set "
            "cost_model.fit_path, or use cost_model.kind: roofline",
            field="cost_model.kind",
        )
    return gpu.kernel_fit


COST_MODELS: MappingProxyType[str, Callable[[Scenario, ModelSpec, Store], CostModel]] = (
    MappingProxyType(
        {
            "roofline": _roofline,
            "vidur_profile": _vidur_profile,
            "fixed_step": _fixed_step,
            "fitted": _fitted,
            "calibrated": build_calibrated,
        }
    )
)


def build_cost_model(scenario: Scenario, store: Store = None) -> CostModel:
    """The cost model the scenario asks for, over its resolved model. store: the results
    database a calibrated model reads its profile from."""
    kind = scenario.cost_model.kind
    builder = COST_MODELS.get(kind)
    if builder is None:
        known = ", ".join(COST_MODELS)
        raise WorkbenchError(
            f"unknown cost model {kind!r} (known: {known})", field="cost_model.kind"
        )
    return builder(scenario, resolve_model(scenario.model), store)


def shape_cost_model(scenario: Scenario, model: ModelSpec) -> CostModel:
    """A cost model for another model shape on the scenario's hardware (a speculative
    draft): the fitted kernels when the scenario uses them, else the roofline (with the
    scenario's efficiencies when it uses the roofline; profiles and fixed steps of the
    target say nothing about another model)."""
    cfg = scenario.cost_model
    if isinstance(cfg, FittedCostConfig):
        return _fitted(scenario, model)
    roofline = cfg if isinstance(cfg, RooflineCostConfig) else RooflineCostConfig(kind="roofline")
    hw = scenario.hardware
    return RooflineCostModel(
        model, get_gpu(hw.gpu), hw.tensor_parallel, scenario.model.dtype, roofline
    )
