"""Sequence scheduling by predicted response length (Zheng et al., 2023) as a scheduler kind."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from workbench.scenario.base import StrictModel
from workbench.scenario.kv_cache import KVCacheConfig
from workbench.scenario.length_prediction import OraclePredictorConfig, PredictorConfig


class SequenceSchedulingConfig(StrictModel):
    """Groups of requests, sorted by predicted length, run as padded static batches.

    `order: arrival` with `vbs` and `fcr` off is the paper's vanilla baseline; `over_limit`
    only matters with `fcr` (without it every batch stops at the limit).
    """

    kind: Literal["sequence_scheduling"] = Field(
        description="Batch inference over groups of requests scheduled by predicted length."
    )
    group_size: int = Field(
        default=256, gt=0, description="Requests scheduled together (in arrival order)."
    )
    batch_size: int = Field(
        default=16,
        gt=0,
        description="Base batch size: every batch without VBS, and FCR recompute batches.",
    )
    generation_limit: int = Field(
        default=512,
        gt=0,
        description="Most tokens a request generates; longer responses are truncated here.",
    )
    order: Literal["predicted", "arrival"] = Field(
        default="predicted",
        description="Inside a group: ascending predicted length (stable), or arrival order.",
    )
    vbs: bool = Field(
        default=False,
        description="Variable batch size: batch by predicted length bucket (multiples of 50), "
        "short buckets in bigger batches.",
    )
    fcr: bool = Field(
        default=False,
        description="Failure collection and recomputation: stop a batch at its predicted "
        "length; unfinished members are recomputed after the group with the full limit.",
    )
    over_limit: Literal["recompute", "truncate"] = Field(
        default="recompute",
        description="A response longer than generation_limit. recompute (the paper's code): "
        "its length is only known to exceed the limit, so it runs to its batch's cap; an FCR "
        "cap (the prediction, kept even above the limit) fails it and its recompute batch "
        "cuts it at the limit. truncate: it ends at the limit in any batch, never an FCR "
        "failure, and FCR caps never exceed the limit.",
    )
    predictor: PredictorConfig = Field(
        default_factory=lambda: OraclePredictorConfig(kind="oracle"),
        description="Where predicted output lengths come from.",
    )
    kv_cache: KVCacheConfig = Field(default_factory=KVCacheConfig, description="Paged KV budget.")

    @model_validator(mode="after")
    def _vbs_needs_sorting(self) -> SequenceSchedulingConfig:
        if self.vbs and self.order != "predicted":
            raise ValueError("vbs batches by predicted length: it needs order: predicted")
        return self
