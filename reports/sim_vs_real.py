"""A real run beside its simulated twin: the error of every latency statistic, throughput,
steps and per-step wall time, and their CDFs overlaid.

Error = sim / real − 1. Latencies are those of `workbench.metrics` (the median and the
90th and 99th percentiles of completed requests); step wall times are `reports.step_walls`
(end of one step to the end of the next, back-to-back steps only), by step kind; a drafting
pair's draft forwards, per drafting step and per drafted token (`reports.step_walls`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from reports.collect import RunData, collect_run
from reports.content import Table
from reports.step_walls import DraftTimes
from reports.tables import MISSING, format_number

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from workbench.store import ResultsStore

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E"))
STATISTICS = ("median", "p90", "p99")
CDF_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"), ("step", "Step wall time"))


def error(sim: float | None, real: float | None) -> float | None:
    if sim is None or real is None or real == 0 or not np.isfinite(real):
        return None
    return float(sim) / float(real) - 1.0


def format_error(value: float | None) -> str:
    return MISSING if value is None else f"{100.0 * value:+.1f}%"


def error_rows(real: RunData, sim: RunData) -> list[tuple[str, float | None, float | None, int]]:
    """(metric, real value, sim value, decimals) for every compared figure."""
    r, s = real.summary, sim.summary
    rows: list[tuple[str, float | None, float | None, int]] = []
    for key, name in LATENCIES:
        for stat in STATISTICS:
            label = f"{name} {stat} (ms)"
            rows.append((label, _number(r, f"{stat}_{key}_ms"), _number(s, f"{stat}_{key}_ms"), 2))
    rows.append(
        ("Requests/s", _number(r, "request_throughput"), _number(s, "request_throughput"), 3)
    )
    rows.append(
        ("Output tokens/s", _number(r, "output_throughput"), _number(s, "output_throughput"), 1)
    )
    rows.append(("Steps", float(real.walls.steps), float(sim.walls.steps), 0))
    for label, pick in (
        ("all", None),
        ("decode only", False),
        ("with prefill", True),
    ):
        real_ms, sim_ms = _walls_ms(real, pick), _walls_ms(sim, pick)
        for stat, reduce in (("median", np.median), ("mean", np.mean)):
            values = [float(reduce(x)) if len(x) else None for x in (real_ms, sim_ms)]
            rows.append((f"Step wall {stat}, {label} (ms)", values[0], values[1], 3))
    return rows + _draft_rows(real.walls.draft, sim.walls.draft)


def _draft_rows(
    real: DraftTimes | None, sim: DraftTimes | None
) -> list[tuple[str, float | None, float | None, int]]:
    """A drafting pair's draft forwards (none where neither run recorded them)."""
    if real is None and sim is None:
        return []
    rows: list[tuple[str, float | None, float | None, int]] = []
    for label, name in (("per drafting step", "per_step_s"), ("per drafted token", "per_token_s")):
        values = [None if t is None else 1000.0 * getattr(t, name) for t in (real, sim)]
        rows.append((f"Draft forwards {label} (ms)", values[0], values[1], 3))
    return rows


def _number(summary: dict, key: str) -> float | None:
    value = summary.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _walls_ms(run: RunData, with_prefill: bool | None) -> np.ndarray:
    walls = run.walls
    chosen = (
        walls.seconds if with_prefill is None else walls.seconds[walls.with_prefill == with_prefill]
    )
    return chosen * 1000.0


def error_table(real: RunData, sim: RunData, matched: RunData | None = None) -> Table:
    """The pair's errors; matched: its speed-matched twin, whose errors get a column."""
    rows = []
    extra = [] if matched is None else [dict(_matched_errors(real, matched))]
    for label, real_value, sim_value, decimals in error_rows(real, sim):
        rows.append(
            [
                label,
                format_number(real_value, decimals) if decimals else _count(real_value),
                format_number(sim_value, decimals) if decimals else _count(sim_value),
                format_error(error(sim_value, real_value)),
                *(errors[label] for errors in extra),
            ]
        )
    cost = sim.config.get("cost_model", {})
    profile = cost.get("profile") or cost.get("profile_csv")
    priced = f"the {sim.cost_model} cost model" + (f" (profile {profile})" if profile else "")
    matched_header = [] if matched is None else [f"Error at the run's speed ({matched.run_id})"]
    return Table(
        title=f"Simulator vs real: {pair_name(real)}",
        headers=[
            "Metric",
            f"Real ({real.run_id})",
            f"Sim ({sim.run_id})",
            "Error",
            *matched_header,
        ],
        rows=rows,
        note=f"Sim priced by {priced}. Error = sim / real − 1. Step wall time: from the end "
        "of the previous step to the end of this one, for steps that followed it back to "
        "back (scheduling and bookkeeping included); the real engine's recorded step "
        "duration holds its forwards only."
        + "".join(f" {d}." for d in _drift_lines(sim))
        + ("" if matched is None else f" {speed_matched_label(matched)}."),
    )


def _matched_errors(real: RunData, matched: RunData) -> list[tuple[str, str]]:
    return [
        (label, format_error(error(value, real_value)))
        for label, real_value, value, _ in error_rows(real, matched)
    ]


def speed_matched_label(matched: RunData) -> str:
    cost = matched.config.get("cost_model", {})
    scale, draft = cost.get("price_scale", 1.0), cost.get("draft_price_scale")
    drafts = "" if draft is None else f" (the draft's × {draft:.4f}, read from its own forwards)"
    return (
        f"At the run's speed: the twin again with every price × {scale:.4f}{drafts}, the real "
        "run's summed step wall times over the twin's prices of those steps (a diagnostic that "
        "reads the machine's speed from the run itself: what is left is the model's and the "
        "dynamics' error, not the check's)"
    )


def _drift_lines(sim: RunData) -> list[str]:
    """The calibration's own repeatability, the machine's drift since calibration and the
    twin's price of the real run's own steps and its own sampling, where `--backend both`
    measured them."""
    info = sim.run.get("info", {})
    return [
        f"{label}: {info[key]}"
        for key, label in (
            ("calibration_repeatability", REPEATABILITY_LABEL),
            ("machine_drift", DRIFT_LABEL),
            ("step_prices", STEP_PRICES_LABEL),
            ("draw_spread", DRAW_SPREAD_LABEL),
        )
        if info.get(key)
    ]


DRAW_SPREAD_LABEL = (
    "The twin's own sampling (the twin simulated again with other draw seeds over the same "
    "requests: each latency's standard deviation over the draws, relative to its mean; an "
    "error within about twice it is within the twin's own noise)"
)
REPEATABILITY_LABEL = (
    "The calibration's machine against itself (the same steps served again in the "
    "calibration's passes; the one real run a twin is checked against carries noise of this "
    "kind)"
)
DRIFT_LABEL = (
    "Machine drift since calibration (two of the profile's probes served again around the "
    "run, median step time against the profile's: a reading of two probes, which can differ "
    "from the run's own steps below by 10 points)"
)
STEP_PRICES_LABEL = (
    "The real run's own steps priced by the twin's cost model (summed prices against summed "
    "wall times; a twin that departs further does so by taking other steps)"
)


def pair_name(real: RunData) -> str:
    """A pair's title: the scenario and the real run (labels differ by backend only)."""
    return f"{real.run['scenario_name']}, real run {real.run_id}"


def _count(value: float | None) -> str:
    return MISSING if value is None else str(int(value))


def pair_error_text(store: ResultsStore, real_id: str, sim_id: str) -> str:
    """The error table of a stored pair as plain text (what `workbench run --backend both`
    prints after each pair)."""
    real, sim = collect_run(store, real_id), collect_run(store, sim_id)
    return "\n".join([*_error_lines(real, sim, "sim vs real"), *_drift_lines(sim)])


def speed_matched_text(store: ResultsStore, real_id: str, matched_id: str | None) -> str:
    """The speed-matched twin's error table as plain text (`--speed-matched`), or why there
    is none."""
    if matched_id is None:
        return "no twin at the run's speed: the real run's own steps were not priced (in full)"
    real, matched = collect_run(store, real_id), collect_run(store, matched_id)
    return "\n".join(
        [*_error_lines(real, matched, "at the run's speed"), speed_matched_label(matched)]
    )


# The twin's diagnostics `--backend both` stores in its info, by key.
DIAGNOSTICS = ("calibration_repeatability", "machine_drift", "step_prices", "draw_spread")


def pair_error_json(
    store: ResultsStore, real_id: str, sim_id: str, matched_id: str | None = None
) -> dict[str, Any]:
    """What `pair_error_text` and `speed_matched_text` print, as one JSON object (`workbench
    run --backend both --json`): per compared figure the real and simulated values and the
    error (sim / real − 1, None where it is undefined), then the twin's diagnostics."""
    real, sim = collect_run(store, real_id), collect_run(store, sim_id)
    info = sim.run.get("info", {})
    pair: dict[str, Any] = {"real": real_id, "sim": sim_id, "errors": _error_json(real, sim)}
    pair["diagnostics"] = {key: info[key] for key in DIAGNOSTICS if info.get(key)}
    if matched_id is not None:
        matched = collect_run(store, matched_id)
        pair["at_run_speed"] = {
            "sim": matched_id,
            "price_scale": matched.config.get("cost_model", {}).get("price_scale"),
            "errors": _error_json(real, matched),
        }
    return {"pair": pair}


def _error_json(real: RunData, sim: RunData) -> dict[str, dict[str, float | None]]:
    return {
        label: {"real": rv, "sim": sv, "error": error(sv, rv)}
        for label, rv, sv, _ in error_rows(real, sim)
    }


def _error_lines(real: RunData, sim: RunData, title: str) -> list[str]:
    rows = [
        (label, _text(rv, decimals), _text(sv, decimals), format_error(error(sv, rv)))
        for label, rv, sv, decimals in error_rows(real, sim)
    ]
    headers = (title, f"real {real.run_id}", f"sim {sim.run_id}", "error")
    widths = [max(len(str(row[i])) for row in (headers, *rows)) for i in range(4)]
    lines = [
        "  ".join(
            str(cell).ljust(width) if i == 0 else str(cell).rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in (headers, *rows)
    ]
    return lines


def _text(value: float | None, decimals: int) -> str:
    return _count(value) if decimals == 0 else format_number(value, decimals)


# ---------------------------------------------------------------- CDF overlay


def cdf_overlay(real: RunData, sim: RunData) -> Figure:
    """TTFT, TPOT, E2E and step wall time CDFs of the real run and its twin, overlaid."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 6.5), layout="constrained")
    for index, (metric, title) in enumerate(CDF_METRICS):
        axes = figure.add_subplot(2, 2, index + 1)
        for run, name, style in ((real, "real", "-"), (sim, "sim", "--")):
            sample_ms = _sample_ms(run, metric)
            if not len(sample_ms):
                continue
            share = np.linspace(0.0, 1.0, min(2000, len(sample_ms)))
            axes.plot(
                np.quantile(sample_ms, share), share, style, color=run.colour,
                label=f"{name} {run.run_id} (n={len(sample_ms)})",
            )  # fmt: skip
        axes.set_title(title, fontsize="medium")
        axes.set_xlabel("ms")
        axes.set_ylabel("share")
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small", loc="lower right")
    return figure


def _sample_ms(run: RunData, metric: str) -> np.ndarray:
    if metric == "step":
        return run.walls.seconds * 1000.0
    return run.latencies_s[metric] * 1000.0
