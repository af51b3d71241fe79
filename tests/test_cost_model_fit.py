"""The fitted kernel cost model: held-out profile points, the catalog's fits reproducible
from their recorded commands, decode spans bit-equal to single steps, clear refusals."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from simulator.catalogs.hardware import GPU_CATALOG, get_gpu
from simulator.catalogs.kernel_fit import ELEMENTWISE_KINDS, TEXT_FIELDS, KernelFit
from simulator.catalogs.models import get_model
from simulator.cost_models.base import StepWork
from simulator.cost_models.factory import build_cost_model
from simulator.cost_models.fidelity import DEFAULT_DATA, vidur_layers, vidur_token_ops
from simulator.cost_models.fit_cli import FitRequest, add_fit_parser, fit_from_files
from simulator.cost_models.fitted import FittedCostModel
from simulator.cost_models.kernel_fitting import (
    HoldOut,
    layer_token_ops_s,
    predict_attention_s,
    predict_op_s,
)
from simulator.cost_models.kernel_profiles import (
    PROFILE_ELEM_BYTES,
    read_attention_points,
    read_token_op_points,
)
from simulator.cost_models.kernel_times import KernelTimes
from simulator.cost_models.measured_here import MEASURED_FIT
from simulator.cost_models.vidur import VidurProfileCostModel
from workbench.cli import main
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scenario.system import FittedCostConfig, VidurProfileCostConfig

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
LLAMA2_7B_A100 = DEFAULT_DATA / "vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"


def fitted(model: str = "llama-2-7b", gpu: str = "a100-80gb", tp: int = 1) -> FittedCostModel:
    spec, card = get_model(model), get_gpu(gpu)
    assert card.kernel_fit is not None
    return FittedCostModel(spec, card, card.kernel_fit, tp, "fp16", FittedCostConfig(kind="fitted"))


@pytest.fixture(scope="module")
def a100_vidur() -> list:
    return [c for c in vidur_token_ops(DEFAULT_DATA) if c.gpu == "a100-80gb"]


def test_held_out_models_and_tp_degrees_are_reproduced(a100_vidur: list) -> None:
    """Llama-3-8B and TP 4 never entered the A100 fit; the issue's token counts land within
    10 %, and nine in ten of all held-out points do."""
    (llama3,) = [c for c in a100_vidur if c.model == "Meta-Llama-3-8B" and c.tensor_parallel == 1]
    assert llama3.held_out
    for tokens in (1, 32, 64, 128, 256, 512, 2048):
        i = int(np.searchsorted(llama3.tokens, tokens))
        assert abs(llama3.errors("after")[i]) < 0.10, tokens
    held = np.concatenate([c.errors("after") for c in a100_vidur if c.held_out])
    assert len(held) > 4000
    assert np.mean(np.abs(held) <= 0.10) > 0.85
    assert abs(held.mean()) < 0.05


def test_the_fit_beats_the_roofline_below_the_ridge(a100_vidur: list) -> None:
    before = np.concatenate([c.errors("before")[c.tokens <= 256] for c in a100_vidur])
    after = np.concatenate([c.errors("after")[c.tokens <= 256] for c in a100_vidur])
    assert before.mean() < -0.15  # the roofline's optimism the issue measured
    assert abs(after.mean()) < 0.05


def request_of(fit: KernelFit) -> FitRequest:
    """The fit request its recorded command makes (paths relative to the repository)."""
    parser = argparse.ArgumentParser()
    add_fit_parser(parser.add_subparsers())
    words = shlex.split(fit.source)
    assert words[:2] == ["workbench", "fit-cost-model"]
    args = parser.parse_args([*words[1:], "--out", "unused.json"])
    mlps = tuple(p for pattern in args.mlp_csv for p in sorted(ROOT.glob(str(pattern))))
    return FitRequest(
        fit.gpu, mlps, tuple(ROOT / p for p in args.attention_csv), args.attention_from,
        HoldOut(frozenset(args.hold_out_model), frozenset(args.hold_out_tp)),
        elementwise_from=args.elementwise_from,
    )  # fmt: skip


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm", "a40"])
def test_catalog_fits_are_reproduced_by_their_recorded_commands(gpu: str) -> None:
    fit = get_gpu(gpu).kernel_fit
    assert fit is not None and fit.gpu == gpu
    assert_same_fit(fit, request_of(fit))


def test_the_shipped_measured_h100_fit_is_reproduced_by_its_recorded_command() -> None:
    fit = KernelFit.from_json(MEASURED_FIT)
    assert "--elementwise-from h100-sxm" in fit.source
    assert_same_fit(fit, request_of(fit))


def assert_same_fit(fit: KernelFit, request: FitRequest) -> None:
    """The refit prices every profiled point within 0.05 % of the fit, and each of its
    parameters is within 0.2 % of the fit's but one the points barely pin: put into the fit
    alone, it moves no point's time by 0.2 %, and it stays within half of the fit's value (the
    shapes a fit is extrapolated to may lean on it more). The shipped H100 fit's prefill
    launch time, 0.16 µs beside 9 µs per CTA, came out 7.5 % lower on an Intel CPU than on
    the AMD one that made it: alone it moves a point by 0.1 %, the refit's times are within
    0.02 %."""
    refit = fit_from_files(request)[0]
    assert refit.decode_attention_kernel == fit.decode_attention_kernel
    shipped = predicted_times(fit, request)
    assert np.abs(predicted_times(refit, request) / shipped - 1.0).max() < 5e-4
    for name in KernelFit.__dataclass_fields__:
        if name in TEXT_FIELDS or name == "decode_attention_kernel":
            continue
        value, expected = getattr(refit, name), getattr(fit, name)
        if value == pytest.approx(expected, rel=2e-3):
            continue
        assert value == pytest.approx(expected, rel=0.5), name
        moved = predicted_times(dataclasses.replace(fit, **{name: value}), request)
        assert np.abs(moved / shipped - 1.0).max() < 2e-3, (name, value, expected)


def predicted_times(fit: KernelFit, request: FitRequest) -> np.ndarray:
    """The fit's time of every point its request profiled: token ops, then attention."""
    times = KernelTimes(get_gpu(fit.gpu), fit, "fp16", PROFILE_ELEM_BYTES)
    ops = [p for path in request.mlp_csvs for p in read_token_op_points(path, request.statistic)]
    parts = [predict_op_s(times, p) for p in ops]
    for path in request.attention_csvs:
        for points in read_attention_points(path, layout=request.attention_layout):
            parts.extend(predict_attention_s(times, points))
    return np.concatenate(parts)


@pytest.mark.parametrize(
    ("model", "gpu", "tp"), [("llama-3-8b", "h100-sxm", 1), ("llama-2-70b", "a100-80gb", 4)]
)
def test_decode_spans_equal_single_steps_bit_for_bit(model: str, gpu: str, tp: int) -> None:
    """Also across the decode kernel's split changes (every 128 keys of the longest)."""
    cost = fitted(model, gpu, tp)
    for batch in (1, 7, 64, 300):
        for longest in (0, 2000):
            span = cost.decode_span_s(batch, batch * 513, 257, longest)
            works = [
                StepWork(
                    decode_batch_size=batch,
                    decode_context_sum=batch * (513 + i),
                    decode_context_max=longest + i if longest else 0,
                )
                for i in range(257)
            ]
            single = [cost.step_time_s(w) for w in works]
            assert span.tolist() == single


def test_multi_token_steps_follow_the_measured_gemm_curve() -> None:
    """Lookahead W15 N5 G15 verifies 121 tokens per sequence: the measured token ops cost
    1.31× one token's (Llama-2-7B, A100); the roofline says 1.05×."""
    points = [p for p in read_token_op_points(LLAMA2_7B_A100) if p.tensor_parallel == 1]
    tokens, measured = layer_token_ops_s(points, None)
    ratio = np.interp(121, tokens, measured) / measured[0]
    cost = fitted()
    assert cost.token_ops_layer_s(121) / cost.token_ops_layer_s(1) == pytest.approx(ratio, rel=0.1)
    one = StepWork(decode_batch_size=1, decode_context_sum=1000)
    window = StepWork(
        decode_batch_size=1, decode_context_sum=1000, decode_extra_tokens=120,
        decode_extra_context_sum=120 * 1000 + 120 * 121 // 2,
    )  # fmt: skip
    assert 1.15 < cost.step_time_s(window) / cost.step_time_s(one) < 1.45


def test_a_gpu_without_fitted_parameters_is_refused_in_one_line() -> None:
    scenario = load_scenario(QUICKSTART, ["cost_model={kind: fitted}", "hardware.gpu=l40s"])
    with pytest.raises(WorkbenchError) as err:
        build_cost_model(scenario)
    message = str(err.value)
    assert "'l40s' has no fitted kernel parameters" in message
    assert "fit-cost-model" in message and "\n" not in message
    fitted_gpus = [name for name, spec in GPU_CATALOG.items() if spec.kernel_fit is not None]
    assert f"with them: {', '.join(fitted_gpus)})" in message


def test_untested_dtypes_are_refused() -> None:
    scenario = load_scenario(QUICKSTART, ["cost_model={kind: fitted}", "model.dtype=fp8"])
    with pytest.raises(WorkbenchError, match="16-bit kernels"):
        build_cost_model(scenario)


def test_a_user_refits_from_a_vidur_csv_with_one_command(tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    code = main(
        ["fit-cost-model", "--gpu", "a100-80gb", "--mlp-csv", str(LLAMA2_7B_A100),
         "--hold-out-tp", "8", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    fit = KernelFit.from_json(out)
    catalog = get_gpu("a100-80gb").kernel_fit
    assert catalog is not None
    assert fit.prefill_shared_cta_flops_share == catalog.prefill_shared_cta_flops_share  # reused
    assert 0.5 < fit.gemm_compute_efficiency < 1.0
    assert "--hold-out-tp 8" in fit.source
    user_fit = f"cost_model={{kind: fitted, fit_path: {out}}}"
    scenario = load_scenario(QUICKSTART, [user_fit, "hardware.gpu=a100-80gb"])
    cost = build_cost_model(scenario)
    assert isinstance(cost, FittedCostModel) and cost.fit == fit
    wrong_gpu = load_scenario(QUICKSTART, [user_fit])
    with pytest.raises(WorkbenchError, match="made for 'a100-80gb'"):
        build_cost_model(wrong_gpu)


def test_a_malformed_fit_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "fit.json"
    bad.write_text('{"gpu": "a100-80gb"}')
    with pytest.raises(WorkbenchError, match=r"not a kernel fit \(missing"):
        KernelFit.from_json(bad)


def test_a_fit_from_before_per_kind_elementwise_kernels_asks_for_a_refit(tmp_path: Path) -> None:
    old = dataclasses.asdict(get_gpu("a100-80gb").kernel_fit)
    for kind in ELEMENTWISE_KINDS:
        del old[f"{kind}_memory_efficiency"], old[f"{kind}_launch_s"]
    old |= {"elementwise_memory_efficiency": 0.42, "elementwise_launch_s": 3.3e-6}
    path = tmp_path / "old_fit.json"
    path.write_text(json.dumps(old))
    with pytest.raises(WorkbenchError, match="refit it with `workbench fit-cost-model`") as err:
        KernelFit.from_json(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_each_elementwise_kind_is_priced_by_its_own_parameters() -> None:
    """One launch and bandwidth share for all five kinds priced Vidur's residual add at about
    2× its measured time and the embedding gather at under half, cancelling in a layer's
    sum; per kind, each op's own mean error is small on every GPU."""
    for gpu, times, layers in vidur_layers(DEFAULT_DATA):
        points = [p for group in layers for p in group]
        for kind in ELEMENTWISE_KINDS:
            mine = [p for p in points if p.op.kind == kind]
            errors = np.concatenate([predict_op_s(times, p) / p.measured_s - 1 for p in mine])
            assert abs(errors.mean()) < 0.10, (gpu.name, kind)


def test_the_profile_model_prices_verification_widths_from_its_token_curve() -> None:
    """Vidur's model: a verification step's token-level ops are its mlp.csv curve at the
    step's token count (121 tokens of Llama-2-70B at TP 2 cost what 128 profiled ones do)."""
    profiles = ROOT / "data" / "profiles" / "vidur"
    cfg = VidurProfileCostConfig(
        kind="vidur_profile",
        mlp_csv=profiles / "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv",
        attention_csv=profiles
        / "compute_legacy_attention/a100/meta-llama/Llama-2-70b-hf_tp2/attention.csv",
        all_reduce_csv=profiles / "network/a100_dgx/all_reduce.csv",
        step_overhead_ms=0.0,
    )
    cost = VidurProfileCostModel(get_model("llama-2-70b"), cfg, 2)
    points = [p for p in read_token_op_points(cfg.mlp_csv) if p.tensor_parallel == 2]
    tokens, layer = layer_token_ops_s(points, None)
    curve_gain = (layer[tokens == 128][0] - layer[tokens == 8][0]) * 80  # 80 layers
    one = StepWork(decode_batch_size=1, decode_context_sum=1000)
    window = StepWork(
        decode_batch_size=1, decode_context_sum=1000, decode_extra_tokens=120,
        decode_extra_context_sum=120 * 1000 + 120 * 121 // 2,
    )  # fmt: skip
    gain = cost.step_time_s(window) - cost.step_time_s(one)
    assert gain > curve_gain > 0.1 * cost.step_time_s(one)  # plus 120 more decode queries


def _bad_copy(tmp_path: Path, edit: str) -> Path:
    """LLAMA2_7B_A100's header and first rows, `edit` applied to its first data row."""
    lines = LLAMA2_7B_A100.read_text().splitlines()[:4]
    header = lines[0].split(",")
    row = lines[1].split(",")
    if edit == "header only":
        lines = lines[:1]
    else:
        column, value = edit.split("=")
        row[header.index(column)] = value
        lines[1] = ",".join(row)
    path = tmp_path / "mlp.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ("time_stats.mlp_up_proj.median=abc", "data row 1: expected a finite number >= 0"),
        ("time_stats.mlp_up_proj.median=-0.2", "got '-0.2'"),
        ("time_stats.mlp_up_proj.median=nan", "got 'nan'"),
        ("num_tensor_parallel_workers=two", "malformed value"),
        ("header only", "no profiled rows"),
    ],
)
def test_a_malformed_profile_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str, expected: str
) -> None:
    path = _bad_copy(tmp_path, edit)
    out = tmp_path / "fit.json"
    code = main(["fit-cost-model", "--gpu", "a100-80gb", "--mlp-csv", str(path), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert err.startswith(f"error: {path}: --mlp-csv: ") and expected in err, err
    assert not out.exists()


@pytest.mark.parametrize("where", ["folder", "missing folder"])
def test_an_unwritable_out_is_refused_before_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    out = tmp_path if where == "folder" else tmp_path / "no" / "fit.json"
    args = ["fit-cost-model", "--gpu", "a100-80gb", "--mlp-csv", str(tmp_path / "none.csv")]
    assert main([*args, "--out", str(out)]) == 2  # the CSV is never read: --out comes first
    err = capsys.readouterr().err.strip()
    assert "--out" in err and "none.csv" not in err and "\n" not in err, err


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--hold-out-model", "Llama-2-7b"], "--hold-out-model: Llama-2-7b is not in the profiles"),
        (["--hold-out-tp", "3"], "--hold-out-tp: 3 is not in the profiles (they have: 1, 2, 4"),
        (["--gpu", "b9000"], "--gpu: unknown GPU 'b9000'"),
    ],
)
def test_fit_options_naming_nothing_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    args = ["fit-cost-model", "--gpu", "a100-80gb", "--mlp-csv", str(LLAMA2_7B_A100)]
    assert main([*args, *extra, "--out", str(tmp_path / "fit.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err, err


def test_a_zero_head_count_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _bad_copy(tmp_path, "n_head=0")
    assert main(["fit-cost-model", "--gpu", "a100-80gb", "--mlp-csv", str(path), "--out",
                 str(tmp_path / "f.json")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "malformed value" in err and "\n" not in err, err
