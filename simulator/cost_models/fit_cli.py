"""`workbench fit-cost-model`: fit a GPU's kernel parameters to Vidur-format profiles.

    workbench fit-cost-model --gpu a100-80gb --mlp-csv my/mlp.csv [more.csv ...] \\
        [--attention-csv my/attention.csv | --attention-from a100-80gb] \\
        [--hold-out-model NAME ...] [--hold-out-tp 4 ...] --out my_fit.json

then `cost_model: {kind: fitted, fit_path: my_fit.json}` in a scenario. The hardware
catalog's own fits were made with this command (each fit's `source` gives it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.kernel_fit import ELEMENTWISE_KINDS, KernelFit, attention_of
from simulator.cost_models.kernel_fitting import (
    START,
    HoldOut,
    fit_attention,
    fit_token_ops,
    layer_token_ops_s,
    op_kinds,
    predict_attention_s,
    rounded,
    token_op_parameters,
)
from simulator.cost_models.kernel_profiles import (
    PROFILE_ELEM_BYTES,
    AttentionPoints,
    OpPoints,
    read_attention_points,
    read_token_op_points,
)
from simulator.cost_models.kernel_times import KernelTimes
from workbench.errors import WorkbenchError, check_output_file

T = TypeVar("T")


@dataclass(frozen=True)
class FitRequest:
    """What to fit: one GPU, its profiles, which points to hold out."""

    gpu: str
    mlp_csvs: tuple[Path, ...]
    attention_csvs: tuple[Path, ...] = ()
    attention_from: str | None = None  # a catalog GPU whose attention parameters to reuse
    hold_out: HoldOut = field(default_factory=HoldOut)
    statistic: str = "median"
    attention_layout: str = "vidur"  # or "llmservingsim" (kernel_profiles' docstring)
    elementwise_from: str | None = None  # a catalog GPU for the kinds the profiles lack


@dataclass(frozen=True)
class ErrorSummary:
    """Relative errors (predicted / measured − 1) of one group of points."""

    label: str
    errors: np.ndarray

    def line(self) -> str:
        e = self.errors
        if len(e) == 0:
            return f"{self.label}: no points"
        within = float(np.mean(np.abs(e) <= 0.10)) * 100
        return (
            f"{self.label}: {len(e)} points, mean {e.mean():+.1%}, rms "
            f"{np.sqrt(np.mean(e**2)):.1%}, worst {e[np.abs(e).argmax()]:+.1%}, "
            f"{within:.0f}% within 10%"
        )


def fit_from_files(request: FitRequest) -> tuple[KernelFit, list[ErrorSummary]]:
    """The fitted parameters (4 significant digits) and their errors on fitted and held-out
    points (per-layer sums of the token ops; attention points)."""
    try:
        gpu = get_gpu(request.gpu)
    except WorkbenchError as error:
        raise WorkbenchError(error.detail, field="--gpu") from None
    points = [
        p
        for path in request.mlp_csvs
        for p in _read(read_token_op_points, path, "--mlp-csv", statistic=request.statistic)
    ]
    if not points:
        files = ", ".join(str(p) for p in request.mlp_csvs)
        raise WorkbenchError(
            "no profiled rows (expected a Vidur mlp.csv's rows)", source=files, field="--mlp-csv"
        )
    _check_hold_out(request.hold_out, points)
    train = [p for p in points if not request.hold_out.holds(p.model, p.tensor_parallel)]
    if not train:
        raise WorkbenchError("every profiled point is held out: nothing to fit", field="--hold-out")
    fit = fit_token_ops(gpu, train, _token_op_base(request, op_kinds(train)))
    attention = [
        p
        for path in request.attention_csvs
        for p in _read(
            read_attention_points, path, "--attention-csv", layout=request.attention_layout
        )
    ]
    fit = _with_attention(fit, request, attention)
    fit = rounded(replace(fit, source=_source(request)))
    times = KernelTimes(gpu, fit, "fp16", PROFILE_ELEM_BYTES)
    held = [p for p in points if request.hold_out.holds(p.model, p.tensor_parallel)]
    summaries = [
        ErrorSummary("token ops per layer, fitted points", _layer_errors(train, times)),
        ErrorSummary("token ops per layer, held-out points", _layer_errors(held, times)),
    ]
    if attention:
        summaries.append(
            ErrorSummary("attention, fitted points", _attention_errors(attention, times))
        )
    return fit, summaries


def _check_hold_out(hold_out: HoldOut, points: list[OpPoints]) -> None:
    """A model or TP degree held out must be in the profiles: a typo would hold out nothing."""
    checks = [
        ("--hold-out-model", set(hold_out.models), {p.model for p in points}),
        ("--hold-out-tp", {str(t) for t in hold_out.tensor_parallel},
         {str(p.tensor_parallel) for p in points}),
    ]  # fmt: skip
    for flag, held, present in checks:
        missing = sorted(held - present)
        if missing:
            known = ", ".join(sorted(present, key=lambda v: (len(v), v)))
            raise WorkbenchError(
                f"{missing[0]} is not in the profiles (they have: {known})", field=flag
            )


def _read(read: Callable[..., list[T]], path: Path, field: str, **options: str) -> list[T]:
    """A profile's points; a value its columns cannot hold (a shape or TP degree that is
    not a number) is a one-line error naming the file."""
    try:
        return read(path, field=field, **options)
    except (ValueError, ArithmeticError) as error:  # "x", inf or a zero head count
        raise WorkbenchError(f"malformed value: {error}", source=str(path), field=field) from None


def _token_op_base(request: FitRequest, kinds: set[str]) -> KernelFit:
    """Where the token-op fit starts; the parameters of kernel kinds the profiles did not
    measure come from `--elementwise-from`'s catalog fit (or the request is refused)."""
    base = replace(START, gpu=request.gpu)
    files = ", ".join(str(p) for p in request.mlp_csvs)
    if "gemm" not in kinds:
        raise WorkbenchError(
            "no GEMM columns to fit (attn_pre_proj, ...)", source=files, field="--mlp-csv"
        )
    missing = [k for k in ELEMENTWISE_KINDS if k not in kinds]
    if not missing:
        if request.elementwise_from:
            raise WorkbenchError(
                "the profiles time every elementwise kind: nothing to take from "
                f"{request.elementwise_from!r}",
                field="--elementwise-from",
            )
        return base
    if not request.elementwise_from:
        raise WorkbenchError(
            f"the profiles time no {', '.join(missing)} kernels: give --elementwise-from GPU "
            "(a catalog GPU with a fit) to take their parameters from",
            source=files,
            field="--mlp-csv",
        )
    donor = get_gpu(request.elementwise_from).kernel_fit
    if donor is None:
        raise WorkbenchError(
            f"the catalog has no kernel fit for {request.elementwise_from!r} to take the "
            f"{', '.join(missing)} kernels' parameters from",
            field="--elementwise-from",
        )
    names = token_op_parameters(set(missing))
    return replace(base, **{name: getattr(donor, name) for name in names})


def _with_attention(
    fit: KernelFit, request: FitRequest, attention: list[AttentionPoints]
) -> KernelFit:
    if attention and request.attention_from:
        raise WorkbenchError(
            "give --attention-csv or --attention-from, not both", field="--attention-from"
        )
    if attention:
        _check_both_phases(attention)
        return fit_attention(get_gpu(request.gpu), attention, fit)
    donor_name = request.attention_from or request.gpu
    donor = get_gpu(donor_name).kernel_fit
    if donor is None:
        raise WorkbenchError(
            f"no attention profile given and the catalog has no fit for {donor_name!r} to "
            "take attention parameters from: give --attention-csv or --attention-from GPU",
            field="--attention-csv",
        )
    return replace(fit, **attention_of(donor))


def _check_both_phases(attention: list[AttentionPoints]) -> None:
    """A profile of decodes alone (or prefills alone) would leave the other phase's parameters
    at their starting guesses: refuse it rather than store unfitted numbers."""
    for phase, count in (
        ("decode", sum(len(p.decode_s) for p in attention)),
        ("prefill", sum(len(p.prefill_s) for p in attention)),
    ):
        if count == 0:
            sources = ", ".join(dict.fromkeys(p.source for p in attention))
            raise WorkbenchError(
                f"no {phase} attention rows: fitting attention needs both decode and prefill "
                "rows (or --attention-from GPU instead)",
                source=sources,
                field="--attention-csv",
            )


def _source(request: FitRequest) -> str:
    parts = [f"workbench fit-cost-model --gpu {request.gpu}"]
    parts.append("--mlp-csv " + " ".join(str(p) for p in request.mlp_csvs))
    if request.attention_csvs:
        parts.append("--attention-csv " + " ".join(str(p) for p in request.attention_csvs))
    if request.attention_layout != "vidur":
        parts.append(f"--attention-layout {request.attention_layout}")
    if request.attention_from:
        parts.append(f"--attention-from {request.attention_from}")
    if request.elementwise_from:
        parts.append(f"--elementwise-from {request.elementwise_from}")
    parts += [f"--hold-out-model {m}" for m in sorted(request.hold_out.models)]
    parts += [f"--hold-out-tp {t}" for t in sorted(request.hold_out.tensor_parallel)]
    return " ".join(parts)


def _layer_errors(points: Sequence[OpPoints], times: KernelTimes) -> np.ndarray:
    groups: dict[tuple[str, str, int], list[OpPoints]] = {}
    for p in points:
        groups.setdefault((p.source, p.model, p.tensor_parallel), []).append(p)
    errors = [
        layer_token_ops_s(g, times)[1] / layer_token_ops_s(g, None)[1] - 1.0
        for g in groups.values()
    ]
    return np.concatenate(errors) if errors else np.array([])


def _attention_errors(points: Sequence[AttentionPoints], times: KernelTimes) -> np.ndarray:
    errors = []
    for p in points:
        decode, prefill = predict_attention_s(times, p)
        errors += [decode / p.decode_s - 1.0, prefill / p.prefill_s - 1.0]
    return np.concatenate(errors)


# ------------------------------------------------------------------ the command


def add_fit_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `fit-cost-model` to an argparse subparsers object (sets `func`)."""
    cmd = sub.add_parser(
        "fit-cost-model", help="fit a GPU's kernel parameters to Vidur-format profiles"
    )
    cmd.add_argument("--gpu", required=True, help="hardware catalog name the profiles ran on")
    cmd.add_argument("--mlp-csv", nargs="+", required=True, type=Path, help="mlp.csv profiles")
    cmd.add_argument("--attention-csv", nargs="*", default=[], type=Path, help="attention.csv")
    cmd.add_argument(
        "--attention-layout",
        default="vidur",
        choices=["vidur", "llmservingsim"],
        help="what the attention.csv columns mean (LLMServingSim: whole-batch keys)",
    )
    cmd.add_argument(
        "--attention-from", help="reuse this catalog GPU's attention parameters (no profile)"
    )
    cmd.add_argument(
        "--elementwise-from",
        help="take the parameters of the elementwise kernels the profiles do not time (norms, "
        "rope, ...; a GEMM-only profile of benchmarks/gpu_kernel_profile.py) from this catalog GPU",
    )
    cmd.add_argument(
        "--hold-out-model", action="append", default=[], help="model (folder name) to check on"
    )
    cmd.add_argument("--hold-out-tp", action="append", default=[], type=int, help="TP to check on")
    cmd.add_argument("--statistic", default="median", choices=["median", "mean", "min", "max"])
    cmd.add_argument("--out", required=True, type=Path, help="fit JSON to write")
    cmd.set_defaults(func=fit_command)
    return cmd


def fit_command(args: argparse.Namespace) -> int:
    check_output_file(args.out, field="--out")  # before the fit, not after it
    request = FitRequest(
        gpu=args.gpu,
        mlp_csvs=tuple(args.mlp_csv),
        attention_csvs=tuple(args.attention_csv),
        attention_from=args.attention_from,
        attention_layout=args.attention_layout,
        elementwise_from=args.elementwise_from,
        hold_out=HoldOut(frozenset(args.hold_out_model), frozenset(args.hold_out_tp)),
        statistic=args.statistic,
    )
    fit, summaries = fit_from_files(request)
    fit.to_json(args.out)
    for summary in summaries:
        print(summary.line())
    print(f"wrote {args.out}: cost_model: {{kind: fitted, fit_path: {args.out}}}")
    return 0
