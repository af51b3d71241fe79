"""One function per figure. Figures are built on `matplotlib.figure.Figure` directly (no
pyplot state); `build_report` selects the Agg backend before calling them.

Every run keeps its colour (`RunData.colour`) and label in every figure; axes carry their
units; a latency axis turns logarithmic when one run's latencies would squash the others;
SLO thresholds are drawn where a latency is. PNGs are rendered at FIGURE_DPI and shown at
100 CSS pixels per inch, so they stay sharp on high-density screens.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports.collect import RunData
from reports.sweeps import SweepCurve

FIGURE_DPI = 200
CSS_PIXELS_PER_INCH = 100
CDF_POINTS = 2000  # quantiles drawn per CDF line, whatever the sample size
LOG_SPREAD = 30.0  # a latency axis is logarithmic when its values span more than this factor
LATENCY_TITLES = {"ttft": "Time to first token", "tpot": "Time per output token"}
LATENCY_TITLES["e2e"] = "End-to-end latency"
SLO_FIELDS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
BATCH_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # hollow: overlaps stay visible
SLO_STYLE = {"color": "#b22222", "linestyle": ":", "linewidth": 1.2}


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=FIGURE_DPI)
    return buffer.getvalue()


def display_width_px(figure: Figure) -> int:
    return round(figure.get_figwidth() * CSS_PIXELS_PER_INCH)


def _legend(axes: Axes, **options: object) -> None:
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small", **options)  # type: ignore[arg-type]


def _log_if_spread(axes: Axes, values: list[float], axis: str) -> None:
    """Log scale when the positive values span more than LOG_SPREAD."""
    positive = [v for v in values if v is not None and np.isfinite(v) and v > 0]
    if positive and max(positive) / min(positive) > LOG_SPREAD:
        (axes.set_xscale if axis == "x" else axes.set_yscale)("log")


def slo_thresholds(runs: list[RunData], metric: str) -> list[float]:
    """The distinct SLO limits (ms) the runs set on a latency (ttft, tpot or e2e)."""
    limits = {getattr(run.slo, SLO_FIELDS[metric]) for run in runs if run.slo is not None}
    return sorted(limit for limit in limits if limit is not None)


# ---------------------------------------------------------------- latency CDFs


def latency_cdf(runs: list[RunData], metric: str) -> Figure:
    """Empirical CDF of one latency (ttft, tpot or e2e) in ms, one line per run."""
    figure = Figure(figsize=(10, 4.2), layout="constrained")
    axes = figure.add_subplot()
    spread: list[float] = []
    for run in runs:
        sample_ms = run.latencies_s[metric] * 1000.0  # (n,)
        if len(sample_ms) == 0:
            continue
        share = np.linspace(0.0, 1.0, min(CDF_POINTS, len(sample_ms)))
        axes.plot(np.quantile(sample_ms, share), share, color=run.colour,
                  label=f"{run.label} (n={len(sample_ms)})")  # fmt: skip
        spread += [float(np.median(sample_ms)), float(np.max(sample_ms))]
    for limit in slo_thresholds(runs, metric):
        axes.axvline(limit, **SLO_STYLE, label=f"SLO {limit:g} ms")
    _log_if_spread(axes, spread, "x")
    axes.set_xlabel(f"{metric.upper()} (ms{', log scale' if axes.get_xscale() == 'log' else ''})")
    axes.set_ylabel("share of completed requests")
    axes.set_ylim(0, 1.02)
    axes.set_title(LATENCY_TITLES[metric])
    axes.grid(alpha=0.3)
    _legend(axes, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside: lines stay visible
    return figure


# ---------------------------------------------------------------- throughput


def throughput_bars(runs: list[RunData]) -> Figure:
    """Request throughput and goodput, and output tokens per second, per run (horizontal
    bars, so that labels stay readable)."""
    height = max(2.6, 0.45 * len(runs) + 1.3)
    figure = Figure(figsize=(9, height), layout="constrained")
    requests_axes, tokens_axes = figure.subplots(1, 2, sharey=True)
    y = np.arange(len(runs))[::-1]  # the first run on top
    colours = [run.colour for run in runs]
    throughput = [run.summary["request_throughput"] or 0.0 for run in runs]
    goodput = [run.summary.get("request_goodput") or 0.0 for run in runs]
    requests_axes.barh(y + 0.2, throughput, height=0.4, color=colours, label="throughput")
    requests_axes.barh(y - 0.2, goodput, height=0.4, color=colours, alpha=0.45, hatch="//",
                       label="goodput (every SLO met)")  # fmt: skip
    requests_axes.set_xlabel("requests / s")
    tokens = [run.summary["output_throughput"] or 0.0 for run in runs]
    tokens_axes.barh(y, tokens, height=0.5, color=colours)
    tokens_axes.set_xlabel("output tokens / s")
    requests_axes.set_yticks(y, [run.label for run in runs], fontsize="small")
    for axes in (requests_axes, tokens_axes):
        axes.grid(axis="x", alpha=0.3)
    _legend(requests_axes, loc="lower right")
    figure.suptitle("Throughput and goodput per run")
    return figure


# ---------------------------------------------------------------- rate sweeps


def rate_sweep(curves: list[SweepCurve]) -> Figure:
    """Against the offered rate: served throughput and goodput (the diagonal serves all),
    and p50/p99 TTFT and p99 TPOT (log scale where they spread), SLOs dotted; the knee of
    each curve starred, saturated points crossed."""
    figure = Figure(figsize=(13, 4.4), layout="constrained")
    served_axes, ttft_axes, tpot_axes = figure.subplots(1, 3)
    highest = max(max(curve.rates) for curve in curves)
    served_axes.plot([0, highest], [0, highest], color="grey", lw=0.8, ls="--",
                     label="served = offered")  # fmt: skip
    latencies: dict[str, list[float]] = {"ttft": [], "tpot": []}
    for curve in curves:
        _served_curve(served_axes, curve)
        latencies["ttft"] += _latency_curve(ttft_axes, curve, "median_ttft_ms", "p50", "--")
        latencies["ttft"] += _latency_curve(ttft_axes, curve, "p99_ttft_ms", "p99", "-")
        latencies["tpot"] += _latency_curve(tpot_axes, curve, "p99_tpot_ms", "p99", "-")
    runs = [run for curve in curves for run in curve.runs]
    for axes, metric in ((ttft_axes, "ttft"), (tpot_axes, "tpot")):
        for limit in slo_thresholds(runs, metric):
            axes.axhline(limit, **SLO_STYLE, label=f"SLO {limit:g} ms")
            latencies[metric].append(limit)
        _log_if_spread(axes, latencies[metric], "y")
        scale = ", log scale" if axes.get_yscale() == "log" else ""
        axes.set_ylabel(f"{metric.upper()} (ms{scale})")
    served_axes.set_ylabel("completed requests / s")
    served_axes.set_title("Throughput and goodput (dashed)")
    ttft_axes.set_title("TTFT: p50 (dashed) and p99")
    tpot_axes.set_title("TPOT p99")
    for axes in (served_axes, ttft_axes, tpot_axes):
        axes.set_xlabel("offered rate (requests / s)")
        axes.grid(alpha=0.3)
        _legend(axes)
    figure.suptitle("Sweep over arrival rate (★ knee: highest rate before saturation; × saturated)")
    return figure


def _served_curve(axes: Axes, curve: SweepCurve) -> None:
    rates = curve.rates
    served = _nan_for_none([run.summary["request_throughput"] for run in curve.runs])
    axes.plot(rates, served, marker="o", color=curve.colour, label=curve.label)
    goodput = _nan_for_none([run.summary.get("request_goodput") for run in curve.runs])
    if not np.all(np.isnan(goodput)):
        axes.plot(rates, goodput, marker="s", ls="--", color=curve.colour, alpha=0.7)
    _mark_knee_and_saturation(axes, curve, served)


def _latency_curve(axes: Axes, curve: SweepCurve, key: str, stat: str, style: str) -> list[float]:
    values = _nan_for_none([run.summary.get(key) for run in curve.runs])
    label = f"{curve.label} {stat}" if stat == "p99" else None
    axes.plot(curve.rates, values, marker="o", ls=style, color=curve.colour, label=label)
    _mark_knee_and_saturation(axes, curve, values)
    return [float(v) for v in values if np.isfinite(v)]


def _mark_knee_and_saturation(axes: Axes, curve: SweepCurve, values: np.ndarray) -> None:
    rates = np.array(curve.rates)
    saturated = np.array([run.saturated for run in curve.runs])
    if saturated.any():
        axes.scatter(rates[saturated], values[saturated], marker="x", s=60, color="black",
                     zorder=3)  # fmt: skip
    knee = curve.knee
    if knee is not None:
        index = curve.runs.index(knee)
        axes.scatter([rates[index]], [values[index]], marker="*", s=220, color=curve.colour,
                     edgecolors="black", zorder=4)  # fmt: skip


def _nan_for_none(values: list[float | int | bool | str | None]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


# ---------------------------------------------------------------- engine steps


def steps_over_time(run: RunData) -> Figure:
    """Batch size and KV blocks in use against time, one line per replica (time-binned),
    in the run's colour (replicas after the first dashed and lighter)."""
    figure = Figure(figsize=(9, 4.6), layout="constrained")
    batch_axes, kv_axes = figure.subplots(2, 1, sharex=True)
    for index, (replica, series) in enumerate(run.step_series.items()):
        style = {"color": run.colour, "lw": 0.8, "alpha": 1.0 if index == 0 else 0.55}
        style["ls"] = "-" if index == 0 else "--"
        batch_axes.plot(series["time_s"], series["batch_size"], label=f"replica {replica}",
                        **style)  # fmt: skip
        kv_axes.plot(series["time_s"], series["kv_blocks"], **style)
    batch_axes.set_ylabel("batch size (sequences)")
    kv_axes.set_ylabel("KV blocks used")
    kv_axes.set_xlabel("time (s)")
    for axes in (batch_axes, kv_axes):
        axes.grid(alpha=0.3)
    if len(run.step_series) > 1:
        _legend(batch_axes)
    figure.suptitle(f"Engine steps: {run.label}")
    return figure


# ---------------------------------------------------------------- static batches


def batch_length_vs_useful(runs: list[RunData]) -> Figure:
    """Static-batch runs: each batch's length against the useful tokens per slot it yielded
    (the diagonal is a batch without padding), and per run the average batch length beside
    the useful tokens per request. Runs sharing a scenario name share their batches (the
    cost model does not change the schedule): the first of each is drawn."""
    figure = Figure(figsize=(11, 4.5), layout="constrained")
    scatter_axes, bar_axes = figure.subplots(1, 2, width_ratios=[3, 2])
    drawn = list({str(run.run["scenario_name"]): run for run in reversed(runs)}.values())[::-1]
    longest = 1
    for index, run in enumerate(drawn):
        batches = run.batches
        assert batches is not None
        per_slot = batches.useful_tokens / np.maximum(batches.slots, 1)  # (b,)
        scatter_axes.scatter(
            batches.length,
            per_slot,
            s=8 + batches.slots / 2,
            marker=BATCH_MARKERS[index % len(BATCH_MARKERS)],
            facecolors="none",
            edgecolors=run.colour,
            linewidths=0.8,
            label=str(run.run["scenario_name"]),
        )
        longest = max(longest, int(batches.length.max()))
    scatter_axes.plot([0, longest], [0, longest], color="grey", lw=0.8, ls="--")
    scatter_axes.set_xlabel("batch length (steps, padding included)")
    scatter_axes.set_ylabel("useful tokens per slot")
    scatter_axes.set_title("Batches (marker size: batch size; dashed: no padding)")
    scatter_axes.grid(alpha=0.3)
    _legend(scatter_axes)
    x = np.arange(len(drawn))
    length = [run.summary.get("avg_batch_length") or 0.0 for run in drawn]
    useful = [
        float(run.summary["total_output_tokens"] or 0) / max(int(run.summary["completed"] or 0), 1)
        for run in drawn
    ]
    bar_axes.bar(x - 0.2, length, width=0.4, label="avg batch length (steps)")
    bar_axes.bar(x + 0.2, useful, width=0.4, label="useful tokens per request")
    bar_axes.set_xticks(x, [str(r.run["scenario_name"]) for r in drawn], rotation=30,
                        ha="right", fontsize="small")  # fmt: skip
    bar_axes.set_ylabel("steps / tokens per request")
    bar_axes.grid(axis="y", alpha=0.3)
    _legend(bar_axes)
    figure.suptitle("Batch length against useful tokens")
    return figure
