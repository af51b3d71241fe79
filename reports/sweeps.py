"""Rate sweeps in a report: runs of one configuration at several arrival rates, one curve.

Runs belong to one curve when their configurations are equal but for the swept key (the
arrival rate) and the paths that never change a result (`labels.IGNORED_ROOTS`): runs of
two schedulers, say, make two curves even under one scenario name. At a rate run more than
once the latest run is drawn. The knee of a curve is its highest rate before the first
saturated run (`workbench.metrics.saturation`): the most it served while keeping up.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from reports.collect import RunData
from reports.labels import IGNORED_ROOTS, run_labels

SWEPT_RATE = "workload.arrival.rate_per_s"


@dataclass
class SweepCurve:
    label: str
    colour: str  # its first run's colour
    runs: list[RunData]  # ascending rate, one per rate

    @property
    def knee(self) -> RunData | None:
        """The highest-rate run before the first saturated one (None: saturated from its
        lowest rate, or never saturated within the rates swept)."""
        first = next((i for i, run in enumerate(self.runs) if run.saturated), None)
        return self.runs[first - 1] if first else None

    @property
    def rates(self) -> list[float]:
        return [float(run.rate_per_s or 0.0) for run in self.runs]


def rate_sweep_curves(runs: list[RunData]) -> list[SweepCurve]:
    """The curves of the runs that form rate sweeps (at least two rates each)."""
    groups: dict[str, list[RunData]] = defaultdict(list)
    for run in runs:
        if run.rate_per_s is not None:
            groups[_curve_key(run.config)].append(run)
    curves = []
    for members in groups.values():
        latest = {run.rate_per_s: run for run in members}  # runs come oldest first
        if len(latest) < 2:
            continue
        ordered = [latest[rate] for rate in sorted(latest)]
        curves.append(SweepCurve("", ordered[0].colour, ordered))
    labels = run_labels(
        [_without_rate(curve.runs[0].config) for curve in curves],
        [str(curve.runs[0].run["scenario_name"]) for curve in curves],
        [None] * len(curves),
    )
    for curve, label in zip(curves, labels, strict=True):
        curve.label = label
    return curves


def _without_rate(config: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(config))
    arrival = copy.get("workload", {}).get("arrival", {})
    if isinstance(arrival, dict):
        arrival.pop("rate_per_s", None)
    return copy


def _curve_key(config: dict[str, Any]) -> str:
    kept = {k: v for k, v in _without_rate(config).items() if k not in IGNORED_ROOTS}
    return json.dumps(kept, sort_keys=True, default=str)
