"""Length predictors: where a length-aware scheduler's predicted output lengths come from.

A registry keyed by `kind` (`workbench/scheduling/length_predictors.py` builds them):
`oracle` reads a field of the workload, `constant` predicts one value, `noisy_oracle` adds
a configurable error to the oracle. A `learned` predictor (a model fine-tuned to predict
its own response length from the prompt, as in Zheng et al. 2023) runs on the real backend
and joins this union in that issue's real-backend half.
"""

from __future__ import annotations

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


PredictorConfig = Annotated[
    OraclePredictorConfig | ConstantPredictorConfig | NoisyOraclePredictorConfig,
    Field(discriminator="kind"),
]
