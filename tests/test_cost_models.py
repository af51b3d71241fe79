"""Roofline and Vidur-profile cost models: physics sanity, profile fidelity, and the
bit-for-bit agreement of `decode_span_s` with `step_time_s` that bulk stepping relies on."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import get_model
from simulator.cost_models.base import CostModel, StepWork
from simulator.cost_models.factory import build_cost_model
from simulator.cost_models.roofline import RooflineCostModel
from simulator.cost_models.vidur import Grid, VidurProfileCostModel, curve_from_points
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scenario.system import RooflineCostConfig, VidurProfileCostConfig

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "data" / "profiles" / "vidur"
MLP_CSV = PROFILES / "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv"
ATTENTION_CSV = (
    PROFILES / "compute_legacy_attention/a100/meta-llama/Llama-2-70b-hf_tp2/attention.csv"
)
ALL_REDUCE_CSV = PROFILES / "network/a100_dgx/all_reduce.csv"
SCENARIO = ROOT / "scenarios" / "vidur_llama2_70b_tp2_a100.yaml"


def roofline(model: str = "llama-2-7b", gpu: str = "a100-80gb", tp: int = 1) -> RooflineCostModel:
    return RooflineCostModel(
        get_model(model), get_gpu(gpu), tp, "fp16", RooflineCostConfig(kind="roofline")
    )


def vidur_config(**changes: object) -> VidurProfileCostConfig:
    fields: dict[str, object] = {
        "kind": "vidur_profile",
        "mlp_csv": MLP_CSV,
        "attention_csv": ATTENTION_CSV,
        "all_reduce_csv": ALL_REDUCE_CSV,
    }
    return VidurProfileCostConfig.model_validate(fields | changes)


@pytest.fixture(scope="module")
def vidur() -> VidurProfileCostModel:
    return VidurProfileCostModel(get_model("llama-2-70b"), vidur_config(), 2)


def decode(batch: int, context_per_seq: int) -> StepWork:
    return StepWork(decode_batch_size=batch, decode_context_sum=batch * context_per_seq)


def prefill(chunk: int, cached: int = 0) -> StepWork:
    return StepWork(prefill_chunk_tokens=(chunk,), prefill_context_tokens=(cached,))


def assert_span_matches_steps(model: CostModel, batch: int, context_sum: int, n: int) -> None:
    span = model.decode_span_s(batch, context_sum, n)
    assert span.shape == (n,)
    for i, value in enumerate(span):
        work = StepWork(decode_batch_size=batch, decode_context_sum=context_sum + i * batch)
        assert value == model.step_time_s(work)  # exact, not approx


# ------------------------------------------------------------------ roofline


def test_roofline_decode_batch1_is_memory_bound() -> None:
    model = roofline()
    spec = get_model("llama-2-7b")
    moved = spec.streamed_weight_bytes(2) + spec.kv_bytes_per_token(2) * (1024 + 1)
    busy_s = model.step_time_s(decode(1, 1024)) - 1e-3  # minus step_overhead_ms
    assert busy_s == pytest.approx(moved / (2039e9 * 0.8), rel=0.01)  # + activations


def test_roofline_prefill_is_compute_bound() -> None:
    model = roofline()
    spec = get_model("llama-2-7b")
    flops = 512 * spec.linear_flops_per_token + spec.lm_head_flops_per_token
    flops += spec.prefill_attention_flops(512, 0)
    busy_s = model.step_time_s(prefill(512)) - 1e-3
    assert busy_s == pytest.approx(flops / (312e12 * 0.6), rel=1e-9)


def test_roofline_grows_with_batch_and_context() -> None:
    model = roofline()
    by_batch = [model.step_time_s(decode(b, 1024)) for b in (1, 8, 64, 256)]
    by_context = [model.step_time_s(decode(64, c)) for c in (128, 1024, 8192)]
    assert by_batch == sorted(by_batch) and by_batch[0] < by_batch[-1]
    assert by_context == sorted(by_context) and by_context[0] < by_context[-1]


def test_roofline_tp2_faster_but_pays_all_reduce() -> None:
    one, two = roofline("llama-2-70b", tp=1), roofline("llama-2-70b", tp=2)
    t1, t2 = one.step_time_s(decode(128, 1024)), two.step_time_s(decode(128, 1024))
    overhead_s = 1e-3
    assert t2 < t1
    # Perfect halving of the busy time would be (t1 − overhead)/2: all-reduces add to it.
    assert t2 - overhead_s > (t1 - overhead_s) / 2


def test_roofline_empty_step_costs_overhead_only() -> None:
    assert roofline().step_time_s(StepWork()) == pytest.approx(1e-3)


def test_roofline_mixed_step_costs_more_than_its_parts_alone() -> None:
    model = roofline()
    mixed = StepWork(
        prefill_chunk_tokens=(256,),
        prefill_context_tokens=(0,),
        decode_batch_size=32,
        decode_context_sum=32 * 1024,
    )
    assert model.step_time_s(mixed) >= model.step_time_s(prefill(256))


@pytest.mark.parametrize(("batch", "context_sum"), [(1, 1), (1, 4096), (7, 7000), (64, 65536)])
def test_roofline_span_equals_steps_bit_for_bit(batch: int, context_sum: int) -> None:
    assert_span_matches_steps(roofline("llama-2-70b", tp=4), batch, context_sum, 40)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 512),
    per_seq=st.integers(1, 32768),
    n=st.integers(1, 64),
    gpu=st.sampled_from(["a100-80gb", "h100-sxm", "l40s", "cpu"]),
    tp=st.sampled_from([1, 2, 8]),
)
def test_roofline_span_equals_steps_hypothesis(
    batch: int, per_seq: int, n: int, gpu: str, tp: int
) -> None:
    assert_span_matches_steps(roofline("llama-3-8b", gpu, tp), batch, batch * per_seq, n)


# ------------------------------------------------------------------ Vidur profiles


def test_vidur_grid_point_equals_csv_numbers(vidur: VidurProfileCostModel) -> None:
    # Decode, batch 32, 1024 cached tokens each (+1 new): every lookup on the grid but the
    # all-reduce. mlp.csv TP2 at num_tokens 32 (medians, ms per layer):
    token_ops = 0.007 + 0.061 + 0.004 + 0.047 + 0.007 + 0.316 + 0.013 + 0.147 + 0.003
    emb = 0.006
    attention = 0.064 + 0.0 + 0.002  # attn_decode + input/output reshape at (32, 1024)
    # all_reduce of 32·8192·2 = 524288 B lies 3/4 of the way from 518144 B (0.048 ms) to
    # 526336 B (0.055 ms).
    all_reduce = 0.25 * 0.048 + 0.75 * 0.055
    expected_ms = (token_ops + attention + 2 * all_reduce) * 80 + emb + 1.0
    got_s = vidur.step_time_s(decode(32, 1025))
    assert got_s * 1000 == pytest.approx(expected_ms, rel=1e-12)
    assert expected_ms == pytest.approx(63.206, abs=1e-9)


def test_vidur_interpolation_lies_between_neighbours(vidur: VidurProfileCostModel) -> None:
    # Decode attention profiled at 1024 and 1088 cached tokens; 1056 is between.
    low, mid, high = (vidur.step_time_s(decode(32, 1 + kv)) for kv in (1024, 1056, 1088))
    assert low < mid < high
    # Prefill of a 512-token chunk, profiled at 512 and 544 cached tokens.
    low, mid, high = (vidur.step_time_s(prefill(512, kv)) for kv in (512, 528, 544))
    assert low < mid < high
    # Chunk sizes between profiled rows change the token-level ops too (measured every 8
    # tokens, not monotone: GEMM tiles), so the chunk axis is checked on the grid itself.


def test_grid_is_bilinear_between_neighbours() -> None:
    grid = Grid(
        rows=np.array([64.0, 128.0]),
        cols=np.array([0.0, 32.0, 64.0]),
        values=np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]]),
    )
    assert grid(np.float64(64), np.float64(32)) == 2.0  # exact on the grid
    assert grid(np.float64(96), np.float64(48)) == pytest.approx((3.0 + 7.0) / 2)
    on_row = grid(np.float64(64), np.array([40.0, 48.0, 56.0]))
    assert np.all((on_row > 2.0) & (on_row < 4.0))
    assert grid(np.float64(10), np.float64(-5)) == 1.0  # held below the grid


def test_curve_extrapolates_along_the_half_range_secant() -> None:
    # Noisy tail (8 → 7.9): the slope comes from x = 4 (nearest half of 8) to 8, not 7 to 8.
    curve = curve_from_points({1.0: [1.0], 2.0: [2.0], 4.0: [4.0], 7.0: [8.0], 8.0: [7.0, 8.8]})
    assert curve(np.float64(3)) == 3.0
    assert curve(np.float64(8)) == pytest.approx(7.9)  # repeated measurements averaged
    assert curve(np.float64(12)) == pytest.approx(7.9 + 4 * (7.9 - 4.0) / 4)
    assert curve(np.float64(0.5)) == 1.0  # held below the grid


def test_vidur_extrapolates_beyond_the_grid(vidur: VidurProfileCostModel) -> None:
    # Decode profiles stop at batch 128 and 4032 cached tokens: keep growing beyond.
    assert vidur.step_time_s(decode(256, 1024)) > vidur.step_time_s(decode(128, 1024))
    assert vidur.step_time_s(decode(32, 8192)) > vidur.step_time_s(decode(32, 4033))
    # Below the first profiled point the first value holds.
    assert vidur.step_time_s(decode(1, 1)) == vidur.step_time_s(decode(1, 33))


@pytest.mark.parametrize(("batch", "context_sum"), [(1, 1), (1, 3000), (32, 32800), (128, 500000)])
def test_vidur_span_equals_steps_bit_for_bit(
    vidur: VidurProfileCostModel, batch: int, context_sum: int
) -> None:
    assert_span_matches_steps(vidur, batch, context_sum, 40)


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 300), per_seq=st.integers(1, 9000), n=st.integers(1, 64))
def test_vidur_span_equals_steps_hypothesis(batch: int, per_seq: int, n: int) -> None:
    model = _shared_vidur()
    assert_span_matches_steps(model, batch, batch * per_seq + batch // 2, n)


_VIDUR: list[VidurProfileCostModel] = []


def _shared_vidur() -> VidurProfileCostModel:
    """Hypothesis tests cannot take module fixtures directly; load the profiles once."""
    if not _VIDUR:
        _VIDUR.append(VidurProfileCostModel(get_model("llama-2-70b"), vidur_config(), 2))
    return _VIDUR[0]


def test_vidur_mismatched_model_names_the_file() -> None:
    with pytest.raises(WorkbenchError, match="n_embd=4096") as info:
        VidurProfileCostModel(get_model("llama-2-7b"), vidur_config(), 2)
    assert info.value.source == str(MLP_CSV)


def test_vidur_attention_profiled_at_other_tp_names_the_file() -> None:
    with pytest.raises(WorkbenchError, match="num_tensor_parallel_workers=4") as info:
        VidurProfileCostModel(get_model("llama-2-70b"), vidur_config(), 4)
    assert info.value.source == str(ATTENTION_CSV)


def test_vidur_mismatched_attention_model_names_the_file(tmp_path: Path) -> None:
    edited = tmp_path / "attention.csv"
    lines = ATTENTION_CSV.read_text().splitlines()
    # n_embd is the 21st column; profile a "different model" by changing it.
    edited_rows = [lines[0]] + [
        ",".join(f if i != 20 else "5120" for i, f in enumerate(row.split(",")))
        for row in lines[1:50]
    ]
    edited.write_text("\n".join(edited_rows) + "\n")
    with pytest.raises(WorkbenchError, match="n_embd") as info:
        VidurProfileCostModel(get_model("llama-2-70b"), vidur_config(attention_csv=edited), 2)
    assert info.value.source == str(edited)


def test_vidur_tp2_without_all_reduce_profile_is_an_error() -> None:
    with pytest.raises(WorkbenchError) as info:
        VidurProfileCostModel(get_model("llama-2-70b"), vidur_config(all_reduce_csv=None), 2)
    assert info.value.field == "cost_model.all_reduce_csv"


def test_vidur_missing_column_names_the_file(tmp_path: Path) -> None:
    wrong = tmp_path / "mlp.csv"
    shutil.copy(ALL_REDUCE_CSV, wrong)
    with pytest.raises(WorkbenchError, match="missing column") as info:
        VidurProfileCostModel(get_model("llama-2-70b"), vidur_config(mlp_csv=wrong), 2)
    assert info.value.source == str(wrong)


# ------------------------------------------------------------------ factory


def test_factory_builds_the_shipped_vidur_scenario() -> None:
    trace = ROOT / "data" / "traces" / "splitwise_conv.csv"
    if not trace.exists():
        pytest.skip("trace not present")
    model = build_cost_model(load_scenario(SCENARIO))
    assert isinstance(model, VidurProfileCostModel)
    assert 0.03 < model.step_time_s(decode(32, 1024)) < 0.1


def test_factory_builds_roofline_by_default() -> None:
    trace = ROOT / "data" / "traces" / "splitwise_conv.csv"
    if not trace.exists():
        pytest.skip("trace not present")
    scenario = load_scenario(SCENARIO, overrides=["cost_model={kind: roofline}"])
    model = build_cost_model(scenario)
    assert isinstance(model, RooflineCostModel)
    assert np.isfinite(model.step_time_s(prefill(512)))
