"""The cost models beside every measured GPU point in `data/profiles/` (Vidur, LLMServingSim,
Splitwise): the roofline with its defaults (before) and the fitted kernel model with the
hardware catalog's fits (after). Prints the Markdown tables of docs/cost_model_fidelity.md.

    python benchmarks/cost_model_fidelity.py [--data data/profiles] [--csv points.csv]
    python benchmarks/cost_model_fidelity.py --specbench   # + Spec-Bench speed-ups (≈15 s)

Errors are predicted / measured − 1. "Held out": points the fit that prices them never saw
(whole models and TP 4 of the Vidur files, per each fit's `source`; every LLMServingSim and
Splitwise point). Runs in a few seconds from a plain clone.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import get_model
from simulator.cost_models.base import StepWork
from simulator.cost_models.fidelity import (
    DEFAULT_DATA,
    SPLITWISE_MODELS,
    Comparison,
    all_comparisons,
    hold_out_of,
    vidur_layers,
)
from simulator.cost_models.fitted import FittedCostModel
from simulator.cost_models.kernel_fitting import layer_token_ops_s, predict_op_s
from simulator.cost_models.kernel_profiles import (
    PROFILE_ELEM_BYTES,
    OpPoints,
    read_token_op_points,
)
from simulator.cost_models.kernel_times import KernelTimes
from simulator.cost_models.measured_here import (
    attention_comparisons,
    gemm_comparisons,
    vidur_over_here,
)
from simulator.cost_models.monotone_bound import most_within_monotone
from simulator.cost_models.roofline import RooflineCostModel
from workbench.scenario.system import FittedCostConfig, RooflineCostConfig

TOKEN_BANDS = ((1, 1), (2, 16), (17, 64), (65, 128), (129, 256), (257, 512), (513, 2048))
TOKEN_BANDS += ((2049, 1 << 20),)
ISSUE_ROWS = (
    ("Llama-2-7b-hf", "a100-80gb", 1),
    ("Meta-Llama-3-8B", "a100-80gb", 1),
    ("Llama-2-70b-hf", "a100-80gb", 2),
    ("Meta-Llama-3-70B", "a100-80gb", 4),
    ("Llama-2-70b-hf", "h100-sxm", 4),
)
ISSUE_TOKENS = (1, 32, 64, 128, 256, 512, 2048)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="profiles folder")
    parser.add_argument("--csv", type=Path, help="also write every point to this CSV")
    parser.add_argument(
        "--specbench", action="store_true", help="also simulate scenarios/specbench_*.yaml"
    )
    args = parser.parse_args()
    if not (args.data / "vidur").is_dir():
        print(f"skipped: no profiles under {args.data} (expected vidur/, ...)", file=sys.stderr)
        return 0
    comparisons = all_comparisons(args.data)
    for section in (
        summary,
        vidur_by_band,
        vidur_by_model,
        issue_table,
        attention_tables,
        llmservingsim_table,
        splitwise_table,
        multi_token_table,
    ):
        print(section(comparisons))
        print()
    for section_of_data in (
        cross_gpu_table,
        op_table,
        error_sources_table,
        measured_here_gemm_table,
        measured_here_attention_table,
    ):
        print(section_of_data(args.data))
        print()
    if args.specbench:
        print(specbench_table())
    if args.csv:
        write_points(comparisons, args.csv)
    return 0


# ------------------------------------------------------------------ statistics


def stats(errors: np.ndarray) -> str:
    """mean / worst / share within 10 %."""
    if len(errors) == 0:
        return "–"
    worst = errors[np.abs(errors).argmax()]
    within = np.mean(np.abs(errors) <= 0.10) * 100
    return f"{errors.mean():+.0%} / {worst:+.0%} / {within:.0f}%"


def pooled(
    cs: Iterable[Comparison], which: str, keep: Callable[[Comparison], np.ndarray] | None = None
) -> np.ndarray:
    parts = []
    for c in cs:
        e = c.errors(which)
        parts.append(e if keep is None else e[keep(c)])
    return np.concatenate(parts) if parts else np.array([])


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def family(c: Comparison) -> str:
    return c.source.split(" (")[0] if c.source.startswith("splitwise") else c.source


# ------------------------------------------------------------------ sections


def summary(cs: list[Comparison]) -> str:
    """Every source: before and after, fitted and held-out points apart."""
    rows = []
    for name in dict.fromkeys(family(c) for c in cs):
        mine = [c for c in cs if family(c) == name]
        for held in (False, True):
            part = [c for c in mine if c.held_out == held]
            if not part:
                continue
            n = sum(len(c.measured_s) for c in part)
            rows.append(
                [
                    name,
                    "held out" if held else "fitted",
                    str(n),
                    stats(pooled(part, "before")),
                    stats(pooled(part, "after")),
                ]
            )
    head = [
        "measured",
        "points",
        "n",
        "roofline: mean / worst / ≤10 %",
        "fitted: mean / worst / ≤10 %",
    ]
    return "### Every source\n\n" + table(head, rows)


def vidur_by_band(cs: list[Comparison]) -> str:
    """Vidur token ops by GPU and tokens per step."""
    vidur = [c for c in cs if c.source == "vidur token ops"]
    rows = []
    for gpu in dict.fromkeys(c.gpu for c in vidur):
        for low, high in TOKEN_BANDS:

            def band(c: Comparison, lo: int = low, hi: int = high) -> np.ndarray:
                return (c.tokens >= lo) & (c.tokens <= hi)

            mine = [c for c in vidur if c.gpu == gpu]
            fitted = [c for c in mine if not c.held_out]
            held = [c for c in mine if c.held_out]
            label = str(low) if low == high else f"{low}–{high if high < 1 << 20 else '…'}"
            rows.append(
                [
                    gpu,
                    label,
                    stats(pooled(mine, "before", band)),
                    stats(pooled(fitted, "after", band)),
                    stats(pooled(held, "after", band)),
                ]
            )
    head = ["GPU", "tokens / step", "roofline (all)", "fitted: fitted points", "fitted: held out"]
    return (
        "### Vidur token-level ops per layer, by tokens per step (mean / worst / ≤10 %)\n\n"
        + table(head, rows)
    )


def vidur_by_model(cs: list[Comparison]) -> str:
    rows = []
    for c in (c for c in cs if c.source == "vidur token ops"):
        mark = " (held out)" if c.held_out else ""
        rows.append(
            [
                c.gpu,
                c.model + mark,
                str(c.tensor_parallel),
                stats(c.errors("before")),
                stats(c.errors("after")),
            ]
        )
    head = ["GPU", "model", "TP", "roofline: mean / worst / ≤10 %", "fitted: mean / worst / ≤10 %"]
    return "### Vidur token-level ops per layer, by GPU, model and TP\n\n" + table(head, rows)


def issue_table(cs: list[Comparison]) -> str:
    rows = []
    for model, gpu, tp in ISSUE_ROWS:
        (c,) = [
            c
            for c in cs
            if c.source == "vidur token ops"
            and (c.model, c.gpu, c.tensor_parallel) == (model, gpu, tp)
        ]
        cells = []
        for t in ISSUE_TOKENS:
            i = int(np.searchsorted(c.tokens, t))
            cells.append(f"{c.errors('before')[i]:+.0%} → {c.errors('after')[i]:+.0%}")
        mark = " (held out)" if c.held_out else ""
        rows.append([f"{model}{mark}, {gpu}, TP {tp}", *cells])
    head = ["model, GPU, TP", *(f"{t} tok" for t in ISSUE_TOKENS)]
    return "### The issue's table: roofline → fitted, token-level ops per layer\n\n" + table(
        head, rows
    )


ATTENTION_TABLES = (  # source, what, rows, row bands, context bands, the fitted column
    (
        "vidur attention decode", "A100, Llama-2-70B TP 2", "batch",
        ((1, 1), (2, 8), (9, 32), (33, 128)), ((0, 512), (513, 2048), (2049, 8192)), "fitted",
    ),
    (
        "vidur attention prefill", "A100, Llama-2-70B TP 2", "chunk",
        ((64, 128), (129, 512), (513, 2048), (2049, 4096)), ((0, 512), (513, 2048), (2049, 8192)),
        "fitted",
    ),
    (
        "llmservingsim attention decode", "H100, Llama-3.1-70B TP 4", "batch",
        ((1, 1), (2, 8), (9, 32), (33, 128), (129, 256)), ((0, 512), (513, 4096), (4097, 65536)),
        "the A100's parameters (held out)",
    ),
    (
        "llmservingsim attention decode (own fit)", "H100, Llama-3.1-70B TP 4", "batch",
        ((1, 1), (2, 8), (9, 32), (33, 128), (129, 256)), ((0, 512), (513, 4096), (4097, 65536)),
        "own fit (fitted)",
    ),
)  # fmt: skip


def attention_tables(cs: list[Comparison]) -> str:
    out = []
    for source, what, label, bands, contexts, fitted in ATTENTION_TABLES:
        mine = [c for c in cs if c.source == source]
        rows = []
        for low, high in bands:
            for klo, khi in contexts:

                def keep(c: Comparison, lo=low, hi=high, a=klo, b=khi) -> np.ndarray:
                    return (c.tokens >= lo) & (c.tokens <= hi) & (c.context >= a) & (c.context <= b)

                if not any(keep(c).any() for c in mine):
                    continue
                rows.append(
                    [
                        f"{low}–{high}",
                        f"{klo}–{khi}",
                        stats(pooled(mine, "before", keep)),
                        stats(pooled(mine, "after", keep)),
                    ]
                )
        head = [label, "cached tokens", "roofline", fitted]
        out.append(f"### {source} ({what}; mean / worst / ≤10 %)\n\n" + table(head, rows))
    return "\n\n".join(out)


def llmservingsim_table(cs: list[Comparison]) -> str:
    rows = []
    for c in (
        c for c in cs if c.source.startswith("llmservingsim") and "attention decode" not in c.source
    ):
        what = c.source.removeprefix("llmservingsim ")
        rows.append(
            [
                c.model,
                str(c.tensor_parallel),
                what,
                stats(c.errors("before")),
                stats(c.errors("after")),
            ]
        )
    head = ["model", "TP", "measured", "roofline", "fitted"]
    return "### LLMServingSim, H100, 1–2048 tokens (held out; mean / worst / ≤10 %)\n\n" + table(
        head, rows
    )


def splitwise_table(cs: list[Comparison]) -> str:
    rows = []
    for c in (c for c in cs if c.source.startswith("splitwise")):
        phase = "prompt" if "prompt" in c.source else "token"
        hardware = c.source[c.source.index("(") + 1 : -1]
        gap_ms = np.median(c.measured_s - c.after_s) * 1000
        rows.append(
            [
                c.model,
                hardware,
                str(c.tensor_parallel),
                phase,
                f"{np.median(c.measured_s) * 1000:.1f}",
                stats(c.errors("before")),
                stats(c.errors("after")),
                f"{gap_ms:+.1f}",
                str(_beyond_peak(c)),
            ]
        )
    head = [
        "model",
        "hardware",
        "TP",
        "step",
        "median measured ms",
        "roofline",
        "fitted",
        "median measured − fitted, ms",
        "points faster than peak FLOP/s",
    ]
    title = "### Splitwise whole-engine steps (held out; step overhead 1 ms; mean / worst / ≤10 %)"
    return title + "\n\n" + table(head, rows)


def _beyond_peak(c: Comparison) -> int:
    """Measured steps shorter than the GEMM FLOPs alone take at the GPUs' peak."""
    spec = SPLITWISE_MODELS[c.model]
    peak = get_gpu(c.gpu).peak_flops("fp16") * c.tensor_parallel
    floor_s = c.tokens * spec.linear_flops_per_token / peak
    return int(np.sum(c.measured_s < floor_s))


def multi_token_table(cs: list[Comparison]) -> str:
    """A verification step of w tokens against a one-token step: Llama-2-7B on one A100."""
    (c,) = [
        c
        for c in cs
        if c.source == "vidur token ops"
        and (c.model, c.gpu, c.tensor_parallel) == ("Llama-2-7b-hf", "a100-80gb", 1)
    ]
    spec, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")
    roofline = RooflineCostModel(spec, gpu, 1, "fp16", RooflineCostConfig(kind="roofline"))
    fit = gpu.kernel_fit
    assert fit is not None
    fitted = FittedCostModel(spec, gpu, fit, 1, "fp16", FittedCostConfig(kind="fitted"))
    rows = []
    for label, width in (
        ("speculative k=4", 5),
        ("lookahead W7 N5 G7", 57),
        ("lookahead W15 N5 G15", 121),
    ):
        measured = np.interp(width, c.tokens, c.measured_s) / c.measured_s[0]
        steps = [_verify_ratio(m, width) for m in (roofline, fitted)]
        layer = [m.token_ops_layer_s(width) / m.token_ops_layer_s(1) for m in (roofline, fitted)]
        rows.append(
            [
                label,
                str(width),
                f"{measured:.2f}×",
                f"{layer[0]:.2f}×",
                f"{layer[1]:.2f}×",
                f"{steps[0]:.2f}×",
                f"{steps[1]:.2f}×",
            ]
        )
    head = [
        "step",
        "tokens",
        "measured token ops",
        "roofline token ops",
        "fitted token ops",
        "roofline whole step",
        "fitted whole step",
    ]
    return (
        "### Multi-token steps against one token: Llama-2-7B, A100, batch 1, 1000 cached tokens\n\n"
        + table(head, rows)
    )


def _verify_ratio(model: RooflineCostModel | FittedCostModel, width: int) -> float:
    context = 1000
    extra = width - 1
    pairs = extra * context + extra * (extra + 1) // 2
    work = StepWork(
        decode_batch_size=1,
        decode_context_sum=context,
        decode_extra_tokens=extra,
        decode_extra_context_sum=pairs,
    )
    one = StepWork(decode_batch_size=1, decode_context_sum=context)
    return model.step_time_s(work) / model.step_time_s(one)


def cross_gpu_table(root: Path) -> str:
    """Held-out GPUs: each GPU's Vidur token ops priced with another GPU's fitted
    efficiencies (on its own peaks), as the catalog does for the RTX 3090 and the H200."""
    rows = []
    for sku, measured_on, fitted_on in (
        ("a40", "a40", "a100-80gb"),
        ("h100", "h100-sxm", "a100-80gb"),
        ("a100", "a100-80gb", "a40"),
    ):
        donor = get_gpu(fitted_on).kernel_fit
        assert donor is not None
        times = KernelTimes(get_gpu(measured_on), donor, "fp16", PROFILE_ELEM_BYTES)
        errors = []
        for path in sorted((root / "vidur" / "compute" / sku).glob("*/*/mlp.csv")):
            points = read_token_op_points(path)
            for tp in sorted({p.tensor_parallel for p in points}):
                group = [p for p in points if p.tensor_parallel == tp]
                errors.append(
                    layer_token_ops_s(group, times)[1] / layer_token_ops_s(group, None)[1] - 1
                )
        rows.append([measured_on, fitted_on, stats(np.concatenate(errors))])
    head = ["GPU measured", "priced with the fit of", "mean / worst / ≤10 %"]
    return "### Held-out GPUs: token ops priced with another GPU's fit\n\n" + table(head, rows)


def op_table(root: Path) -> str:
    """Each token-level op alone (fitted and held-out points together)."""
    rows = []
    for gpu, times, layers in vidur_layers(root):
        points = [p for group in layers for p in group]
        for name in dict.fromkeys(p.op.name for p in points):
            mine = [p for p in points if p.op.name == name]
            errors = np.concatenate([predict_op_s(times, p) / p.measured_s - 1 for p in mine])
            monotone = _monotone_share([(p.tokens, p.measured_s) for p in mine])
            rows.append([gpu.name, name, mine[0].op.kind or "GEMM", stats(errors), monotone])
    head = [
        "GPU", "op", "kernel kind", "fitted: mean / worst / ≤10 %",
        "best non-decreasing curve per model and TP: ≤10 %",
    ]  # fmt: skip
    return "### Vidur token-level ops one by one\n\n" + table(head, rows)


def _monotone_share(curves: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """The share of the curves' points that a non-decreasing curve through each (its own)
    can put within 10 %: what no shape-monotone model can beat (`monotone_bound`)."""
    within = sum(most_within_monotone(tokens, measured, 0.10) for tokens, measured in curves)
    return f"{within / sum(len(tokens) for tokens, _ in curves):.0%}"


def error_sources_table(root: Path) -> str:
    """Where the layer sums' misses come from: the share of (held-out) layer sums within
    10 % with the GEMMs or the elementwise kernels taken from the measurements, and when
    each measured point is interpolated from its two neighbours (what any smooth curve
    through the same model's measurements could reach), and the most points one
    non-decreasing curve per layer can put within 10 % (what any model that never prices more
    tokens faster could reach)."""
    rows = []
    for gpu, times, layers in vidur_layers(root):
        assert gpu.kernel_fit is not None
        held = hold_out_of(gpu.kernel_fit)
        cells = []
        for measured_kind in (None, "elementwise", "gemm", "neighbours"):
            errors = [
                _layer_errors_with(group, times, measured_kind)
                for group in layers
                if held.holds(group[0].model, group[0].tensor_parallel)
            ]
            cells.append(f"{np.mean(np.abs(np.concatenate(errors)) <= 0.10):.0%}")
        held_layers = [g for g in layers if held.holds(g[0].model, g[0].tensor_parallel)]
        cells.append(_monotone_share([layer_token_ops_s(g, None) for g in held_layers]))
        rows.append([gpu.name, *cells])
    head = [
        "GPU (held-out layer sums)", "fitted model", "with measured elementwise kernels",
        "with measured GEMMs", "measurements interpolated from their neighbours",
        "best non-decreasing curve through them",
    ]  # fmt: skip
    return "### Where the misses are: share within 10 %\n\n" + table(head, rows)


def measured_here_gemm_table(root: Path) -> str:
    """The H100 GEMMs measured here, by tokens per step: the catalog's H100 fit, the fit made
    from them, and Vidur's H100 measurement of the same GEMMs, each against ours."""
    bands = [b for b in TOKEN_BANDS if b[0] <= 4096]
    rows = []
    for c in gemm_comparisons(root):
        mark = " (held out)" if c.held_out else ""
        for which, label in (("before", "catalog fit"), ("after", "fit on these")):
            cells = [_band_mean(c.tokens, c.errors(which), band) for band in bands]
            rows.append([f"{c.model}{mark}, TP {c.tensor_parallel}", label, *cells])
    for model, tp, tokens, errors in vidur_over_here(root):
        cells = [_band_mean(tokens, errors, band) for band in bands]
        rows.append([f"{model}, TP {tp}", "Vidur's H100 measurement", *cells])
    head = [
        "model",
        "against ours",
        *[f"{lo}–{min(hi, 4096)}" if lo < hi else f"{lo}" for lo, hi in bands],
    ]
    return (
        "### H100 GEMMs measured here: mean error of a layer's four GEMMs by tokens per step\n\n"
        + table(head, rows)
    )


def _band_mean(tokens: np.ndarray, errors: np.ndarray, band: tuple[int, int]) -> str:
    keep = (tokens >= band[0]) & (tokens <= band[1])
    return f"{errors[keep].mean():+.0%}" if keep.any() else "–"


def measured_here_attention_table(root: Path) -> str:
    """The H100 attention measured here: the catalog's H100 fit (the A100's attention
    parameters) and the fit on the SDPA kernel's points, which prices the Triton kernel too."""
    rows = [
        [
            c.source + (" (another kernel)" if c.held_out else ""),
            str(len(c.measured_s)),
            stats(c.errors("before")),
            stats(c.errors("after")),
        ]
        for c in attention_comparisons(root)
    ]
    head = ["measured here", "points", "catalog fit", "fit on these"]
    return "### H100 attention measured here (mean / worst / ≤10 %)\n\n" + table(head, rows)


def _layer_errors_with(
    group: list[OpPoints], times: KernelTimes, measured: str | None
) -> np.ndarray:
    tokens, truth = layer_token_ops_s(group, None)
    if measured == "neighbours":  # each inner point from the two around it
        x, y = tokens.astype(float), truth
        guess = y[:-2] + (y[2:] - y[:-2]) * (x[1:-1] - x[:-2]) / (x[2:] - x[:-2])
        return guess / y[1:-1] - 1
    total = np.zeros(len(tokens))
    for p in group:
        if p.op.name == "emb":
            continue
        use_measured = measured == ("gemm" if p.op.gemm is not None else "elementwise")
        values = p.measured_s if use_measured else predict_op_s(times, p)
        total += values[np.isin(p.tokens, tokens)]
    return total / truth - 1


# ------------------------------------------------------------------ Spec-Bench


SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
LEADERBOARD = {  # (method, model, device): (tokens per step, published speed-up)
    ("sps", "vicuna-13b", "a100-80gb"): (2.18, 1.49),
    ("sps", "vicuna-33b", "a100-80gb"): (2.01, 1.61),
    ("sps", "vicuna-7b", "rtx3090"): (2.29, 1.83),
    ("lookahead", "vicuna-13b", "a100-80gb"): (1.63, 1.22),
    ("lookahead", "vicuna-33b", "a100-80gb"): (1.61, 1.24),
    ("lookahead", "vicuna-7b", "rtx3090"): (1.65, 1.08),
}


def specbench_table() -> str:
    """Each Spec-Bench scenario against its own vanilla run (output tokens per second)."""
    from simulator.run import simulate
    from workbench.metrics import summarize
    from workbench.scenario.loader import load_scenario

    rows = []
    for path in sorted(SCENARIOS.glob("specbench_*.yaml")):
        scenario = load_scenario(path)
        if scenario.backend != "sim":
            continue
        method = "sps" if scenario.decoder.kind == "speculative" else "lookahead"
        key = (method, scenario.model.name, scenario.hardware.gpu)
        tau, published = LEADERBOARD[key]
        runs = {}
        for label, overrides in (("decoder", []), ("vanilla", ["decoder={kind: vanilla}"])):
            records = simulate(load_scenario(path, overrides))
            steps = records.steps
            decode = steps.prefill_tokens == 0
            runs[label] = (summarize(records), steps.emitted_tokens[decode].mean())
        speedup = float(runs["decoder"][0]["output_throughput"]) / float(
            runs["vanilla"][0]["output_throughput"]
        )
        rows.append(
            [
                path.stem,
                f"{tau:.2f}",
                f"{runs['decoder'][1]:.2f}",
                f"{published:.2f}×",
                f"{speedup:.2f}×",
                f"{speedup / published - 1:+.0%}",
            ]
        )
    head = [
        "scenario",
        "published tokens/step",
        "simulated tokens/step",
        "published speed-up",
        "predicted",
        "difference",
    ]
    return (
        "### Spec-Bench speed-ups at batch 1 over HF eager (fitted kernels + HF overhead)\n\n"
        + table(head, rows)
    )


def write_points(cs: list[Comparison], path: Path) -> None:
    with path.open("w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(
            [
                "source",
                "gpu",
                "model",
                "tp",
                "held_out",
                "tokens",
                "context",
                "measured_s",
                "roofline_s",
                "fitted_s",
            ]
        )
        for c in cs:
            for i in range(len(c.tokens)):
                w.writerow(
                    [
                        c.source,
                        c.gpu,
                        c.model,
                        c.tensor_parallel,
                        c.held_out,
                        c.tokens[i],
                        c.context[i],
                        c.measured_s[i],
                        c.before_s[i],
                        c.after_s[i],
                    ]
                )


if __name__ == "__main__":
    raise SystemExit(main())
