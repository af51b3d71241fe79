"""The report's answer first: each run against a baseline, the winner of every metric, and
the share of requests meeting each SLO."""

from __future__ import annotations

from reports.collect import RunData
from reports.content import Table
from reports.tables import MISSING, SATURATED_MARK, run_name
from workbench.metrics import SummaryValue

WINNER_MARK = "★"
# (header, summary key, whether higher is better)
HEADLINE_METRICS = [
    ("Throughput", "request_throughput", True),
    ("Goodput", "request_goodput", True),
    ("TTFT p50", "median_ttft_ms", False),
    ("TTFT p99", "p99_ttft_ms", False),
    ("TPOT p50", "median_tpot_ms", False),
    ("TPOT p99", "p99_tpot_ms", False),
    ("E2E p50", "median_e2el_ms", False),
    ("E2E p99", "p99_e2el_ms", False),
]
SLO_NAMES = {"ttft": ("TTFT", "ttft_ms"), "tpot": ("TPOT", "tpot_ms"), "e2e": ("E2E", "e2e_ms")}


def headline_table(runs: list[RunData], baseline: RunData) -> Table:
    """Every run's value over the baseline's, per metric; the best run per metric starred."""
    winners = {key: _winners(runs, key, higher) for _, key, higher in HEADLINE_METRICS}
    rows = []
    for run in runs:
        row = [run_name(run) + (" (baseline)" if run is baseline else "")]
        for _, key, _ in HEADLINE_METRICS:
            ratio = _ratio(run.summary.get(key), baseline.summary.get(key))
            cell = MISSING if ratio is None else f"{ratio:.2f}×"
            row.append(cell + (f" {WINNER_MARK}" if run.run_id in winners[key] else ""))
        rows.append(row)
    return Table(
        title=f"Against the baseline: {baseline.label}",
        headers=["Run", *(header for header, _, _ in HEADLINE_METRICS)],
        rows=rows,
        row_titles=[f"run {run.run_id}" for run in runs],
        note="Each cell is the run's value over the baseline's: above 1 is better for "
        "throughput and goodput, below 1 is better for latencies. "
        f"{WINNER_MARK}: the best run of this report for that metric. Baseline values: "
        f"{_baseline_values(baseline)}. {SATURATED_MARK}: saturated, its latencies measure "
        "a growing queue (see the warnings).",
    )


def _winners(runs: list[RunData], key: str, higher: bool) -> set[str]:
    values = {run.run_id: _number(run.summary.get(key)) for run in runs}
    known = {run_id: v for run_id, v in values.items() if v is not None}
    if len(known) < 2:
        return set()
    best = max(known.values()) if higher else min(known.values())
    return {run_id for run_id, v in known.items() if v == best}


def _ratio(value: SummaryValue, base: SummaryValue) -> float | None:
    value, base = _number(value), _number(base)
    if value is None or base is None or base == 0:
        return None
    return value / base


def _number(value: SummaryValue) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _baseline_values(baseline: RunData) -> str:
    parts = []
    for header, key, _ in HEADLINE_METRICS:
        value = _number(baseline.summary.get(key))
        unit = "req/s" if key.startswith("request_") else "ms"
        parts.append(f"{header} {MISSING if value is None else f'{value:.3g}'} {unit}")
    return ", ".join(parts)


def slo_table(runs: list[RunData]) -> Table | None:
    """The share of completed requests meeting each SLO, and every SLO at once (None when
    no run sets an SLO)."""
    names = [
        name for name in SLO_NAMES if any(f"slo_{name}_attainment" in run.summary for run in runs)
    ]
    if not names:
        return None
    headers = ["Run"]
    limit_in_cell = {}
    for name in names:
        title, field = SLO_NAMES[name]
        limits = {getattr(run.slo, field) for run in runs if run.slo is not None} - {None}
        limit_in_cell[name] = len(limits) != 1
        headers.append(f"{title} SLO" if limit_in_cell[name] else f"{title} ≤ {limits.pop():g} ms")
    headers.append("Every SLO")
    rows = []
    for run in runs:
        row = [run_name(run)]
        for name in names:
            limit = _limit(run, name) if limit_in_cell[name] else None
            row.append(_share(run.summary.get(f"slo_{name}_attainment"), limit))
        row.append(_share(_every_slo_share(run), None))
        rows.append(row)
    return Table(
        title="SLO attainment",
        headers=headers,
        rows=rows,
        row_titles=[f"run {run.run_id}" for run in runs],
        note="Share of completed requests meeting the SLO (– where the run's scenario does not "
        "set it); every SLO: goodput / throughput. A column titled 'SLO' holds runs with "
        "different limits: each cell names its own.",
    )


def _limit(run: RunData, name: str) -> float | None:
    return None if run.slo is None else getattr(run.slo, SLO_NAMES[name][1])


def _share(value: SummaryValue, limit: float | None) -> str:
    share = _number(value)
    if share is None:
        return MISSING
    text = f"{100.0 * share:.1f}%"
    return f"{text} (≤ {limit:g} ms)" if limit is not None else text


def _every_slo_share(run: RunData) -> float | None:
    good, served = (
        _number(run.summary.get("request_goodput")),
        _number(run.summary.get("request_throughput")),
    )
    return None if good is None or not served else good / served
