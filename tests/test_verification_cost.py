"""Pricing multi-token decode steps (`StepWork.decode_extra_*`) in the cost models."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import get_model
from simulator.cost_models.base import StepWork
from simulator.cost_models.roofline import RooflineCostModel
from simulator.cost_models.vidur import VidurProfileCostModel
from workbench.scenario.system import RooflineCostConfig, VidurProfileCostConfig

VIDUR = Path(__file__).resolve().parents[1] / "data" / "profiles" / "vidur"


def roofline() -> RooflineCostModel:
    cfg = RooflineCostConfig(kind="roofline")
    return RooflineCostModel(get_model("llama-2-7b"), get_gpu("a100-80gb"), 1, "fp16", cfg)


def verify(batch: int, context: int, extra: int) -> StepWork:
    """`batch` sequences of `context` KV each verifying `extra` drafted tokens (a chain)."""
    pairs = batch * (extra * context + extra * (extra + 1) // 2)
    return StepWork(
        decode_batch_size=batch,
        decode_context_sum=batch * context,
        decode_extra_tokens=batch * extra,
        decode_extra_context_sum=pairs,
    )


def test_no_extra_tokens_keeps_the_vanilla_decode_price_bit_for_bit() -> None:
    model = roofline()
    assert model.step_time_s(verify(8, 1000, 0)) == model.decode_span_s(8, 8000, 1)[0]


def test_verifying_drafts_is_cheap_when_memory_bound_and_not_when_compute_bound() -> None:
    model = roofline()
    small = model.step_time_s(verify(1, 1000, 4)) / model.step_time_s(verify(1, 1000, 0))
    assert 1.0 < small < 1.1  # weights are read once for all five tokens
    large = model.step_time_s(verify(256, 100, 4)) / model.step_time_s(verify(256, 100, 0))
    assert large > 3.0  # 5x the GEMM FLOPs once compute-bound


def test_vidur_prices_drafts_as_more_decode_queries() -> None:
    cfg = VidurProfileCostConfig(
        kind="vidur_profile",
        mlp_csv=VIDUR / "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv",
        attention_csv=VIDUR
        / "compute_legacy_attention/a100/meta-llama/Llama-2-70b-hf_tp2/attention.csv",
        all_reduce_csv=VIDUR / "network/a100_dgx/all_reduce.csv",
    )
    model = VidurProfileCostModel(get_model("llama-2-70b"), cfg, 2)
    plain, drafted = model.step_time_s(verify(4, 1000, 0)), model.step_time_s(verify(4, 1000, 4))
    assert plain < drafted < 5 * plain
    assert model.step_time_s(verify(4, 1000, 0)) == pytest.approx(
        model.decode_span_s(4, 4000, 1)[0]
    )
