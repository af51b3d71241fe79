"""KV sizing rules: Vidur's memory planner (whole request slots) and vLLM's rule with the
activation reserve of the step's real token budget (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.capacity import activation_reserve_bytes, kv_capacity_blocks
from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import get_model
from simulator.run import replica_kv_blocks
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scenario.system import KVCacheConfig

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_vidur_sizing_reproduces_vidurs_block_count_for_its_scenario() -> None:
    scenario = load_scenario(SCENARIOS / "vidur_llama2_70b_tp2_a100.yaml")
    assert scenario.scheduler.kv_cache.sizing == "vidur"
    assert replica_kv_blocks(scenario) == 3328  # Vidur's planner, data/peer_runs/vidur


def test_vidur_sizing_matches_hand_arithmetic_for_llama3_8b_on_h100() -> None:
    kv = KVCacheConfig(sizing="vidur", max_request_tokens=4096)
    blocks = kv_capacity_blocks(get_model("llama-3-8b"), get_gpu("h100-sxm"), 1, "bf16", kv)
    # Per layer: q, k, v, o = 4096·128·(2·32 + 2·8) = 41,943,040; MLP 3·4096·14,336 =
    # 176,160,768; × 32 layers × 2 bytes = 13,958,643,712 bytes of layer weights.
    # Memory 81,559 MiB × 0.9 = 76,968,998,092 bytes; 63,010,354,380 left.
    # A 4096-token slot: 2 (K, V) · 2 bytes · 128 · 8 heads · 4096 · 32 layers = 536,870,912.
    # 117 slots of 4096 / 16 = 256 blocks.
    assert blocks == 117 * 256


def test_vidur_sizing_needs_the_slot_length() -> None:
    with pytest.raises(ValueError, match="max_request_tokens"):
        KVCacheConfig(sizing="vidur")


def test_a_model_too_big_for_vidurs_planner_names_tensor_parallel() -> None:
    kv = KVCacheConfig(sizing="vidur", max_request_tokens=4096)
    with pytest.raises(WorkbenchError, match="fits no request") as info:
        kv_capacity_blocks(get_model("llama-2-70b"), get_gpu("a100-80gb"), 1, "fp16", kv)
    assert info.value.field == "hardware.tensor_parallel"


def test_vllm_reserve_is_sized_for_the_chunk_when_prefill_is_chunked() -> None:
    base = ["scheduler.kv_cache={block_size: 16}"]  # vLLM's rule on the same hardware
    chunked = load_scenario(SCENARIOS / "vidur_llama2_70b_tp2_a100.yaml", base)
    whole = load_scenario(
        SCENARIOS / "vidur_llama2_70b_tp2_a100.yaml",
        [*base, "scheduler.chunked_prefill=false", "scheduler.max_batched_tokens=8192"],
    )
    model, block_bytes = (
        get_model("llama-2-70b"),
        16 * get_model("llama-2-70b").kv_bytes_per_token(2),
    )
    saved = activation_reserve_bytes(model, 2, "fp16", 8192) - activation_reserve_bytes(
        model, 2, "fp16", 512
    )
    gained = replica_kv_blocks(chunked) - replica_kv_blocks(whole)
    assert gained == pytest.approx(saved / block_bytes, abs=1)
    assert 300 < gained < 400  # the "about 350 blocks"
