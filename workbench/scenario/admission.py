"""Admission order of continuous batching: which waiting request is admitted next.

`fcfs` is vLLM's order. The length-aware orders rank waiting requests by their predicted
output length (a `predictor`) and protect long requests from starving with `aging_s`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from workbench.scenario.base import StrictModel
from workbench.scenario.length_prediction import OraclePredictorConfig, PredictorConfig


class FcfsAdmission(StrictModel):
    kind: Literal["fcfs"] = Field(description="First come, first served (vLLM).")


class PredictedAdmission(StrictModel):
    """What every length-aware order has: a predictor and starvation protection."""

    predictor: PredictorConfig = Field(
        default_factory=lambda: OraclePredictorConfig(kind="oracle"),
        description="Where predicted output lengths come from.",
    )
    aging_s: float | None = Field(
        default=None,
        gt=0,
        description="Starvation protection: a request waiting this long goes before every "
        "younger one (oldest first). Null: none.",
    )


class ShortestPredictedAdmission(PredictedAdmission):
    kind: Literal["shortest_predicted"] = Field(
        description="Shortest predicted output first; ties in arrival order."
    )


class LengthBucketAdmission(PredictedAdmission):
    kind: Literal["length_buckets"] = Field(
        description="Shortest predicted bucket first, arrival order inside a bucket: coarse "
        "shortest-first that a noisy predictor cannot reorder within a bucket."
    )
    bucket_tokens: int = Field(
        default=50, gt=0, description="Bucket width: predictions rounded up to a multiple."
    )


AdmissionConfig = Annotated[
    FcfsAdmission | ShortestPredictedAdmission | LengthBucketAdmission,
    Field(discriminator="kind"),
]
