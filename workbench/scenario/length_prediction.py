"""Length predictors: where a length-aware scheduler's predicted output lengths come from.

A registry keyed by `kind` (`workbench/scheduling/length_predictors.py` builds them):
`oracle` reads a field of the workload, `constant` predicts one value, `noisy_oracle` adds
a configurable error to the oracle. `learned` reads each prompt with the served model and
asks a small head trained on the lengths that model produced (`workbench predictor train`,
`real_backend/length_predictor/`): "perception in advance" (Zheng et al. 2023) without
fine-tuning the model. It needs torch and real prompts (`workload.prompts`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from workbench.scenario.base import StrictModel


class OraclePredictorConfig(StrictModel):
    kind: Literal["oracle"] = Field(
        description="The workload's oracle length: `lengths_from_trace.oracle_columns` (e.g. "
        "the max over several samplings), else the request's true output length."
    )


class ConstantPredictorConfig(StrictModel):
    kind: Literal["constant"] = Field(description="The same prediction for every request.")
    value: int = Field(gt=0, description="The predicted output length in tokens.")


class NoisyOraclePredictorConfig(StrictModel):
    kind: Literal["noisy_oracle"] = Field(
        description="The oracle times a seeded lognormal error: oracle × (1 + bias) × "
        "exp(spread × z), z ~ N(0, 1), rounded (up to a bucket when given), at least 1."
    )
    bias: float = Field(
        default=0.0, gt=-1, description="Relative bias of the median prediction (0.1: +10%)."
    )
    spread: float = Field(
        default=0.3, ge=0, description="Standard deviation of the log error (0: no noise)."
    )
    bucket_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Round predictions up to a multiple of this, as a bucket classifier would "
        "(null: to the nearest token).",
    )
    max_tokens: int | None = Field(
        default=None,
        gt=0,
        description="The largest prediction (after rounding), as a model trained on bounded "
        "targets never predicts beyond them; null: unbounded.",
    )


class LearnedPredictorConfig(StrictModel):
    kind: Literal["learned"] = Field(
        description="A head on the served model's hidden state of the prompt, trained on the "
        "lengths that model produced (`workbench predictor train`). Needs torch and "
        "workload.prompts."
    )
    path: Path | None = Field(
        default=None,
        description="The trained predictor's folder (relative to the scenario). Null: the zoo "
        "model's own, `<zoo cache>/<name>/length_predictor` (the train command's default).",
    )


PredictorConfig = Annotated[
    OraclePredictorConfig
    | ConstantPredictorConfig
    | NoisyOraclePredictorConfig
    | LearnedPredictorConfig,
    Field(discriminator="kind"),
]
