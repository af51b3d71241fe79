"""Per-run data a report needs, read from the results store and reduced to a small size.

One run's full records are loaded, summarised by `workbench.metrics` (the one metrics
module), and dropped; a report keeps only the latency samples and downsampled step series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reports.labels import run_labels
from reports.step_walls import StepWalls, step_walls
from workbench import metrics
from workbench.metrics.batch import Batches, find_batches
from workbench.metrics.decoder import category_breakdown
from workbench.records import OutputRecords, StepRecords
from workbench.scenario.system import SLOConfig
from workbench.store import ResultsStore
from workbench.store.summaries import config_dict, run_slo

MAX_STEP_POINTS = 5000  # per run, over all replicas drawn
MAX_REPLICAS_DRAWN = 8


@dataclass
class RunData:
    run: dict[str, Any]  # the runs row (ResultsStore.get_run)
    config: dict[str, Any]  # the parsed config_json
    summary: dict[str, metrics.Number]
    latencies_s: dict[str, np.ndarray]  # ttft/tpot/e2e of completed requests: (n_metric,)
    step_series: dict[int, dict[str, np.ndarray]]  # replica → time_s, batch_size, kv_blocks
    replicas_total: int
    batches: Batches | None = None  # static-batch runs: per batch length, slots, useful tokens
    # prompt category → completed, mean_tpot_ms, mean_tokens_per_decode_step (empty: none)
    by_category: dict[str, dict[str, metrics.Number]] = field(default_factory=dict)
    slo: SLOConfig | None = None
    # Wall time of each back-to-back step (`reports.step_walls`), for sim-vs-real errors.
    walls: StepWalls = field(
        default_factory=lambda: StepWalls(np.zeros(0), np.zeros(0, dtype=bool), 0)
    )
    outputs: OutputRecords | None = None  # what a real run answered
    label: str = ""  # what tells it apart from the report's other runs (`assign_labels`)
    colour: str = "C0"  # its colour in every figure

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])

    @property
    def saturated(self) -> bool:
        return bool(self.summary.get("saturated"))

    @property
    def rate_per_s(self) -> float | None:
        arrival = self.config.get("workload", {}).get("arrival", {})
        rate = arrival.get("rate_per_s") if isinstance(arrival, dict) else None
        return float(rate) if isinstance(rate, int | float) else None

    @property
    def cost_model(self) -> str:
        cost = self.config.get("cost_model", {})
        kind = str(cost.get("kind", "?"))
        return f"{kind} {cost['step_ms']:g} ms" if "step_ms" in cost else kind

    @property
    def hardware(self) -> str:
        hw = self.config.get("hardware", {})
        text = f"{hw.get('gpu', '?')} ×{hw.get('replicas', 1)}"
        if hw.get("tensor_parallel", 1) != 1:
            text += f" TP{hw['tensor_parallel']}"
        device = self.run.get("info", {}).get("device")
        return f"{text} ({device})" if self.run["backend"] == "real" and device else text


def collect_run(store: ResultsStore, run_id: str) -> RunData:
    run = store.get_run(run_id)
    config = config_dict(run["config_json"])
    records = store.load_records(run["run_id"])
    per_request = metrics.request_metrics(records)
    done = per_request["finished"]
    latencies = {
        name: per_request[f"{name}_s"][done & np.isfinite(per_request[f"{name}_s"])]
        for name in ("ttft", "tpot", "e2e")
    }
    series, total = _step_series(records.steps)
    slo = run_slo(config)
    summary = metrics.summarize(records, slo)
    return RunData(
        run=run,
        config=config,
        summary=summary,
        latencies_s=latencies,
        step_series=series,
        replicas_total=total,
        batches=find_batches(records) if "effective_token_ratio" in summary else None,
        by_category=category_breakdown(records),
        slo=slo,
        walls=step_walls(records),
        outputs=records.outputs,
    )


def assign_labels(runs: list[RunData]) -> None:
    """Each run's label (what tells it apart, `reports.labels`) and its colour: tab10's
    colours while they last, then tab20's, so a run keeps one colour in every figure."""
    labels = run_labels(
        [run.config for run in runs],
        [str(run.run["scenario_name"]) for run in runs],
        [run.run.get("label") for run in runs],
    )
    palette = "tab10" if len(runs) <= 10 else "tab20"
    for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
        run.label = label
        run.colour = _palette_colour(palette, index)


def _palette_colour(palette: str, index: int) -> str:
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    colours = colormaps[palette].colors  # type: ignore[attr-defined]
    return to_hex(colours[index % len(colours)])


def _step_series(steps: StepRecords) -> tuple[dict[int, dict[str, np.ndarray]], int]:
    """Time-binned batch size and KV blocks per replica, ≤ MAX_STEP_POINTS points in all."""
    replicas = np.unique(steps.replica)
    drawn = replicas[:MAX_REPLICAS_DRAWN]
    per_line = MAX_STEP_POINTS // max(len(drawn), 1)
    series = {}
    for replica in drawn:
        rows = steps.replica == replica
        order = np.argsort(steps.start_s[rows], kind="stable")
        time_s = steps.start_s[rows][order]
        series[int(replica)] = {
            "time_s": downsample(time_s, time_s, per_line),
            "batch_size": downsample(time_s, steps.batch_size[rows][order], per_line),
            "kv_blocks": downsample(time_s, steps.kv_blocks_used[rows][order], per_line),
        }
    return series, len(replicas)


def downsample(time_s: np.ndarray, values: np.ndarray, max_points: int) -> np.ndarray:
    """Means of `values` over ≤ max_points equal time bins (empty bins dropped).

    time_s: (k,) sorted float; values: (k,). Applying it to time_s itself gives the bins'
    mean times, so the pair stays aligned.
    """
    values = np.asarray(values, dtype=np.float64)
    if len(time_s) <= max_points:
        return values
    edges = np.linspace(time_s[0], time_s[-1], max_points + 1)  # (max_points + 1,)
    bins = np.clip(np.searchsorted(edges, time_s, side="right") - 1, 0, max_points - 1)
    counts = np.bincount(bins, minlength=max_points)  # (max_points,)
    sums = np.bincount(bins, weights=values, minlength=max_points)
    used = counts > 0
    return sums[used] / counts[used]
