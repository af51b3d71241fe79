"""Length predictors: each request's predicted output length, for length-aware scheduling.

A registry keyed by the predictor's `kind`. Predictions are made for the whole workload
at once, before the run, so they are fixed by the scenario seed and identical on both
backends; a policy reads them from `Sequence.predicted_tokens`. The noisy oracle draws
from its own generator, `component_rng(seed, "length_predictor")`, in request order.
The learned predictor (`real_backend/length_predictor/`) runs the served model's
checkpoint over each prompt: the real backend registers it, as it needs torch.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import REAL_EXTRA_INSTALL, WorkbenchError
from workbench.scenario.length_prediction import (
    ConstantPredictorConfig,
    NoisyOraclePredictorConfig,
    PredictorConfig,
)
from workbench.scenario.seqsched import SequenceSchedulingConfig
from workbench.scenario.system import ContinuousBatchingConfig, SchedulerConfig
from workbench.seeding import component_rng
from workbench.workload.requests import Workload


class LengthPredictor(ABC):
    @abstractmethod
    def predict(self, workload: Workload) -> np.ndarray:
        """Predicted output tokens of every request: (n,) int64, each >= 1."""


def oracle_tokens(workload: Workload) -> np.ndarray:
    """What an oracle knows: the workload's oracle column, else the true output length."""
    oracle = workload.oracle_tokens
    return np.asarray(workload.output_tokens if oracle is None else oracle, dtype=np.int64)


class OraclePredictor(LengthPredictor):
    def predict(self, workload: Workload) -> np.ndarray:
        return oracle_tokens(workload).copy()


@dataclasses.dataclass(frozen=True)
class ConstantPredictor(LengthPredictor):
    value: int

    def predict(self, workload: Workload) -> np.ndarray:
        return np.full(len(workload), self.value, dtype=np.int64)


@dataclasses.dataclass
class NoisyOraclePredictor(LengthPredictor):
    """oracle × (1 + bias) × exp(spread × z), z ~ N(0, 1): a lognormal error whose median
    factor is 1 + bias; rounded to the nearest token or up to a bucket, at least 1, at most
    `max_tokens`."""

    bias: float
    spread: float
    bucket_tokens: int | None
    rng: np.random.Generator
    max_tokens: int | None = None

    def predict(self, workload: Workload) -> np.ndarray:
        z = self.rng.standard_normal(len(workload))  # (n,)
        noisy = oracle_tokens(workload) * (1.0 + self.bias) * np.exp(self.spread * z)  # (n,)
        if self.bucket_tokens is not None:
            noisy = np.ceil(noisy / self.bucket_tokens) * self.bucket_tokens
        if self.max_tokens is not None:
            noisy = np.minimum(noisy, self.max_tokens)
        return np.maximum(np.rint(noisy), 1).astype(np.int64)


def _noisy(cfg: NoisyOraclePredictorConfig, seed: int, checkpoint: Path | None) -> LengthPredictor:
    rng = component_rng(seed, "length_predictor")
    return NoisyOraclePredictor(cfg.bias, cfg.spread, cfg.bucket_tokens, rng, cfg.max_tokens)


def _constant(cfg: ConstantPredictorConfig, seed: int, checkpoint: Path | None) -> LengthPredictor:
    return ConstantPredictor(cfg.value)


PredictorFactory = Callable[[Any, int, Path | None], LengthPredictor]

# (config, scenario seed, the served model's checkpoint folder or None) → predictor.
# Backends add theirs with `register_predictor`: the real backend adds "learned" when
# `real_backend.length_predictor.predictor` is imported (`workbench.plugins` does so on demand).
PREDICTORS: dict[str, PredictorFactory] = {
    "oracle": lambda cfg, seed, checkpoint: OraclePredictor(),
    "constant": _constant,
    "noisy_oracle": _noisy,
}


def register_predictor(kind: str, factory: PredictorFactory) -> None:
    PREDICTORS[kind] = factory


def build_predictor(
    cfg: PredictorConfig, seed: int, checkpoint: Path | None = None
) -> LengthPredictor:
    factory = PREDICTORS.get(cfg.kind)
    if factory is None:
        raise WorkbenchError(
            f"the {cfg.kind} predictor comes with the real backend, which is not loaded "
            f"({REAL_EXTRA_INSTALL})",
            field="predictor.kind",
        )
    return factory(cfg, seed, checkpoint)


def scheduler_predictor(cfg: SchedulerConfig) -> PredictorConfig | None:
    """The predictor a scheduler section asks for, or None when it needs none."""
    if isinstance(cfg, SequenceSchedulingConfig):
        return cfg.predictor
    if isinstance(cfg, ContinuousBatchingConfig):
        return getattr(cfg.admission, "predictor", None)
    return None


def with_predictions(
    workload: Workload, scheduler: SchedulerConfig, seed: int, checkpoint: Path | None = None
) -> Workload:
    """The workload with `predicted_tokens` filled in, when the scheduler needs predictions
    and the workload has none yet. `checkpoint`: the served model's folder (None: a catalog
    model), which a learned predictor reads the prompts with."""
    cfg = scheduler_predictor(scheduler)
    if cfg is None or workload.predicted_tokens is not None:
        return workload
    try:
        predicted = build_predictor(cfg, seed, checkpoint).predict(workload)  # (n,)
    except WorkbenchError as exc:
        if exc.field is None or not exc.field.startswith("predictor"):
            raise
        field = exc.field.replace("predictor", predictor_field(scheduler), 1)
        raise WorkbenchError(exc.detail, source=exc.source, field=field) from None
    return dataclasses.replace(workload, predicted_tokens=predicted)


def predictor_field(scheduler: SchedulerConfig) -> str:
    """Where the scheduler section names its predictor, for error messages."""
    if isinstance(scheduler, SequenceSchedulingConfig):
        return "scheduler.predictor"
    return "scheduler.admission.predictor"
