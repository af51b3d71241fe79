"""One function per figure. Figures are built on `matplotlib.figure.Figure` directly (no
pyplot state); `build_report` selects the Agg backend before calling them."""

from __future__ import annotations

import io
from collections import defaultdict

import numpy as np
from matplotlib.figure import Figure

from reports.collect import RunData

CDF_POINTS = 2000  # quantiles drawn per CDF line, whatever the sample size
LATENCY_TITLES = {"ttft": "Time to first token", "tpot": "Time per output token"}
LATENCY_TITLES["e2e"] = "End-to-end latency"
BATCH_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # hollow: overlaps stay visible


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def latency_cdf(runs: list[RunData], metric: str) -> Figure:
    """Empirical CDF of one latency (ttft, tpot or e2e) in ms, one line per run."""
    figure = Figure(figsize=(7, 4), layout="constrained")
    axes = figure.add_subplot()
    for run in runs:
        sample_ms = run.latencies_s[metric] * 1000.0  # (n,)
        if len(sample_ms) == 0:
            continue
        share = np.linspace(0.0, 1.0, min(CDF_POINTS, len(sample_ms)))
        axes.plot(np.quantile(sample_ms, share), share, label=f"{run.label} (n={len(sample_ms)})")
    axes.set_xlabel(f"{metric.upper()} (ms)")
    axes.set_ylabel("share of completed requests")
    axes.set_title(LATENCY_TITLES[metric])
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend(fontsize="small")
    return figure


def throughput_bars(runs: list[RunData]) -> Figure:
    """Request throughput and goodput, and output tokens per second, per run."""
    figure = Figure(figsize=(max(6.0, 1.2 * len(runs) + 3), 4), layout="constrained")
    requests_axes, tokens_axes = figure.subplots(1, 2)
    x = np.arange(len(runs))
    labels = [run.run_id[:10] for run in runs]
    throughput = [run.summary["request_throughput"] or 0.0 for run in runs]
    goodput = [run.summary["request_goodput"] or 0.0 for run in runs]
    requests_axes.bar(x - 0.2, throughput, width=0.4, label="throughput")
    requests_axes.bar(x + 0.2, goodput, width=0.4, label="goodput (SLOs met)")
    requests_axes.set_ylabel("requests / s")
    requests_axes.legend(fontsize="small")
    tokens_axes.bar(x, [run.summary["output_throughput"] or 0.0 for run in runs], width=0.5)
    tokens_axes.set_ylabel("output tokens / s")
    for axes in (requests_axes, tokens_axes):
        axes.set_xticks(x, labels, rotation=30, ha="right", fontsize="small")
        axes.grid(axis="y", alpha=0.3)
    figure.suptitle("Throughput and goodput per run")
    return figure


def sweep_groups(runs: list[RunData]) -> dict[str, list[RunData]]:
    """Runs sharing a scenario name and differing in arrival rate, sorted by rate."""
    groups: dict[str, list[RunData]] = defaultdict(list)
    for run in runs:
        if run.rate_per_s is not None:
            groups[str(run.run["scenario_name"])].append(run)
    return {
        name: sorted(members, key=lambda run: run.rate_per_s or 0.0)
        for name, members in groups.items()
        if len({run.rate_per_s for run in members}) > 1
    }


def rate_sweep(groups: dict[str, list[RunData]]) -> Figure:
    """Throughput, goodput and p99 TTFT against the arrival rate, one line per scenario."""
    figure = Figure(figsize=(10, 4), layout="constrained")
    rate_axes, ttft_axes = figure.subplots(1, 2)
    for name, members in groups.items():
        rates = [run.rate_per_s for run in members]
        served = [run.summary["request_throughput"] for run in members]
        line = rate_axes.plot(rates, _nan_for_none(served), marker="o", label=f"{name} throughput")
        good = _nan_for_none([run.summary["request_goodput"] for run in members])
        if not np.all(np.isnan(good)):
            rate_axes.plot(rates, good, marker="s", linestyle="--", color=line[0].get_color(),
                           label=f"{name} goodput")  # fmt: skip
        p99 = _nan_for_none([run.summary["p99_ttft_ms"] for run in members])
        ttft_axes.plot(rates, p99, marker="o", label=name)
    rate_axes.set_ylabel("requests / s")
    ttft_axes.set_ylabel("p99 TTFT (ms)")
    for axes in (rate_axes, ttft_axes):
        axes.set_xlabel("arrival rate (requests / s)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle("Sweep over arrival rate")
    return figure


def _nan_for_none(values: list[float | int | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def steps_over_time(run: RunData) -> Figure:
    """Batch size and KV blocks in use against time, one line per replica (time-binned)."""
    figure = Figure(figsize=(9, 5), layout="constrained")
    batch_axes, kv_axes = figure.subplots(2, 1, sharex=True)
    for replica, series in run.step_series.items():
        batch_axes.plot(series["time_s"], series["batch_size"], lw=0.8, label=f"replica {replica}")
        kv_axes.plot(series["time_s"], series["kv_blocks"], lw=0.8)
    batch_axes.set_ylabel("batch size")
    kv_axes.set_ylabel("KV blocks used")
    kv_axes.set_xlabel("time (s)")
    for axes in (batch_axes, kv_axes):
        axes.grid(alpha=0.3)
    if len(run.step_series) > 1:
        batch_axes.legend(fontsize="small")
    figure.suptitle(f"Engine steps: {run.label}")
    return figure


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
        color = f"C{index % 10}"
        scatter_axes.scatter(
            batches.length,
            per_slot,
            s=8 + batches.slots / 2,
            marker=BATCH_MARKERS[index % len(BATCH_MARKERS)],
            facecolors="none",
            edgecolors=color,
            linewidths=0.8,
            label=str(run.run["scenario_name"]),
        )
        longest = max(longest, int(batches.length.max()))
    scatter_axes.plot([0, longest], [0, longest], color="grey", lw=0.8, ls="--")
    scatter_axes.set_xlabel("batch length (steps, padding included)")
    scatter_axes.set_ylabel("useful tokens per slot")
    scatter_axes.set_title("Batches (marker size: batch size; dashed: no padding)")
    scatter_axes.grid(alpha=0.3)
    scatter_axes.legend(fontsize="small")
    x = np.arange(len(drawn))
    length = [run.summary.get("avg_batch_length") or 0.0 for run in drawn]
    useful = [
        run.summary["total_output_tokens"] / max(int(run.summary["completed"] or 0), 1)
        for run in drawn
    ]
    bar_axes.bar(x - 0.2, length, width=0.4, label="avg batch length")
    bar_axes.bar(x + 0.2, useful, width=0.4, label="useful tokens per request")
    bar_axes.set_xticks(x, [str(r.run["scenario_name"]) for r in drawn], rotation=30,
                        ha="right", fontsize="small")  # fmt: skip
    bar_axes.set_ylabel("tokens per request")
    bar_axes.grid(axis="y", alpha=0.3)
    bar_axes.legend(fontsize="small")
    figure.suptitle("Batch length against useful tokens")
    return figure
