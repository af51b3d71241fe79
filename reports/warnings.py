"""Results a reader must not take at face value, said before any table."""

from __future__ import annotations

from reports.collect import RunData
from reports.matching import twin_is_calibrated, twin_pairs
from reports.tables import format_number


def report_warnings(runs: list[RunData]) -> list[str]:
    return [*_saturated(runs), *_uncalibrated_twins(runs)]


def _saturated(runs: list[RunData]) -> list[str]:
    return [
        f"{run.label} is saturated: {run.summary.get('saturation')}. The engine did not keep "
        "up with the arrivals, so its latencies grow with the run's length rather than "
        "describe the configuration."
        for run in runs
        if run.saturated
    ]


def _uncalibrated_twins(runs: list[RunData]) -> list[str]:
    warnings = []
    for real, twin in twin_pairs(runs):
        if twin_is_calibrated(twin):
            continue
        device = real.run.get("info", {}).get("device") or real.hardware
        real_tpot = format_number(real.summary.get("mean_tpot_ms"), 2)
        sim_tpot = format_number(twin.summary.get("mean_tpot_ms"), 2)
        warnings.append(
            f"{twin.label} simulates {real.label} with the {twin.cost_model} cost model, which "
            f"is not calibrated on {device}: its times (mean TPOT {sim_tpot} ms against "
            f"{real_tpot} ms measured) do not predict the real run's."
        )
    return warnings
