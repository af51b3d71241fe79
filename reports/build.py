"""Build a comparison report (HTML + Markdown + PNGs) from the results database alone.

The report answers first: warnings about results not to take at face value (saturated
runs, uncalibrated simulator twins), each run against a baseline with the winner of every
metric, SLO attainment; then narrow tables and figures, every run named by its label
(`reports.labels`) and drawn in one colour throughout.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from reports.apar import apar_tables
from reports.collect import RunData, assign_labels, collect_run
from reports.content import FigureImage, Report, Table
from reports.decoders import decoder_tables, sim_vs_real_table
from reports.headline import headline_table, slo_table
from reports.html import render_html
from reports.markdown import render_markdown
from reports.matching import speed_matched_twin, twin_pairs
from reports.pipeline import pipeline_tables
from reports.planning import plan_probe_ids, planning_images
from reports.sim_vs_real import cdf_overlay, error_table, pair_name
from reports.sweeps import rate_sweep_curves
from reports.tables import latency_tables, runs_table, seqsched_table, throughput_table
from reports.warnings import report_warnings
from workbench.errors import WorkbenchError
from workbench.store import ResultsStore

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def build_report(
    store: ResultsStore, run_ids: list[str] | None, out_dir: Path, *, baseline: str | None = None
) -> Path:
    """Write out_dir/report.html (self-contained), out_dir/report.md and its PNGs.

    run_ids: full ids or unique prefixes; None reports every run. baseline: the run the
    headline compares the others with (default: the first); added when not among run_ids.
    Returns the HTML path."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; selected here, not when reports is imported
    ids = _resolve(store, run_ids)
    out_dir = _report_folder(Path(out_dir))  # before the figures are drawn
    plan_tables, plan_figures = planning_images(store) if run_ids is None else ([], [])
    if plan_tables:  # a plan's probes get its own section, not one row each
        probes = set(plan_probe_ids(store))
        ids = [run_id for run_id in ids if run_id not in probes]
    report = _plan_report(store, plan_tables, plan_figures)
    if ids:
        report = _runs_report(store, ids, baseline, report)
    try:
        for figure in report.all_figures:
            (out_dir / f"{figure.name}.png").write_bytes(figure.png)
        (out_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
        html_path = out_dir / "report.html"
        html_path.write_text(render_html(report), encoding="utf-8")
    except OSError as error:
        raise WorkbenchError(
            f"could not write the report ({error.strerror})", source=str(out_dir)
        ) from None
    return html_path


def _report_folder(out_dir: Path) -> Path:
    """The report's folder, made if missing; a file there or a folder that cannot be made is
    a one-line error."""
    if out_dir.exists() and not out_dir.is_dir():
        raise WorkbenchError(
            "a file, not a folder: expected the report's folder", source=str(out_dir)
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WorkbenchError(
            f"cannot make the report folder ({error.strerror})", source=str(out_dir)
        ) from None
    return out_dir


def _plan_report(store: ResultsStore, tables: list[Table], figures: list[FigureImage]) -> Report:
    """The report's frame, holding the planning section when the database has plans."""
    return Report(
        title="Decoding workbench report",
        facts=[
            ("Database", store.path),
            ("Generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")),
        ],
        headline=tables,
        figures=figures,
    )


def _runs_report(
    store: ResultsStore, ids: list[str], baseline: str | None, report: Report
) -> Report:
    """Add the runs' sections (after any planning section) to `report`."""
    base_id = store.resolve_run_id(baseline) if baseline is not None else ids[0]
    if base_id not in ids:
        ids.insert(0, base_id)
    runs = [collect_run(store, run_id) for run_id in ids]
    assign_labels(runs)
    base = next(run for run in runs if run.run_id == base_id)
    report.facts[1:1] = [
        ("Runs", str(len(runs))),
        ("Baseline", f"{base.label} (run {base.run_id})"),
    ]
    report.warnings = report_warnings(runs)
    report.headline += _headline(runs, base)
    report.figures += _figures(runs)
    report.tables = _tables(runs)
    report.detail_figures = _detail_figures(runs)
    return report


def _resolve(store: ResultsStore, run_ids: list[str] | None) -> list[str]:
    if run_ids is None:
        ids = [str(run["run_id"]) for run in store.list_runs()]
    else:
        ids = list(dict.fromkeys(store.resolve_run_id(run_id) for run_id in run_ids))
    if not ids:
        raise WorkbenchError("no runs to report", source=store.path)
    return ids


def _headline(runs: list[RunData], baseline: RunData) -> list[Table]:
    tables = [headline_table(runs, baseline)] if len(runs) > 1 else []
    slo = slo_table(runs)
    return tables + ([slo] if slo is not None else [])


def _tables(runs: list[RunData]) -> list[Table]:
    tables = [runs_table(runs), throughput_table(runs), *latency_tables(runs)]
    batched = [run for run in runs if run.batches is not None]
    if batched:
        tables.append(seqsched_table(batched))
    tables += decoder_tables(runs)
    tables += apar_tables(runs)  # APAR: branches, KV, the twin without forks, sim vs real
    tables += pipeline_tables(runs)  # PipeInfer and its baselines over pipeline stages
    twins = sim_vs_real_table(runs)
    if twins is not None:
        tables.append(twins)
    tables += [
        error_table(real, sim, speed_matched_twin(real, runs)) for real, sim in twin_pairs(runs)
    ]
    return tables


def _figures(runs: list[RunData]) -> list[FigureImage]:
    from reports import figures  # imports matplotlib, after the backend is chosen

    images = []
    curves = rate_sweep_curves(runs)
    if curves:
        caption = (
            "One curve per configuration (runs equal but for the arrival rate). ★ the knee: "
            "the highest rate before the first saturated run; × saturated runs; dotted red: "
            "SLO limits."
        )
        images.append(
            _image("rate_sweep", "Sweep over arrival rate", figures.rate_sweep(curves), caption)
        )
    for metric in ("ttft", "tpot", "e2e"):
        figure = figures.latency_cdf(runs, metric)
        caption = "Dotted red: the SLO limit." if figures.slo_thresholds(runs, metric) else ""
        images.append(_image(f"cdf_{metric}", f"{metric.upper()} CDF", figure, caption))
    images.append(_image("throughput", "Throughput and goodput", figures.throughput_bars(runs)))
    for real, sim in twin_pairs(runs):
        title = f"Real run beside its simulated twin, CDFs: {pair_name(real)}"
        caption = f"Solid: real run {real.run_id}; dashed: its simulated twin {sim.run_id}."
        images.append(_image(f"twin_cdf_{real.run_id}", title, cdf_overlay(real, sim), caption))
    return images


def _detail_figures(runs: list[RunData]) -> list[FigureImage]:
    from reports import figures

    images = []
    batched = [run for run in runs if run.batches is not None]
    if batched:
        figure = figures.batch_length_vs_useful(batched)
        images.append(_image("batch_lengths", "Batch length against useful tokens", figure))
    for index, run in enumerate(runs):
        caption = f"Run {run.run_id}. Time-binned means (at most 5000 points per run)."
        if run.replicas_total > len(run.step_series):
            caption += f" First {len(run.step_series)} of {run.replicas_total} replicas shown."
        name = f"steps_{index:02d}_" + re.sub(r"[^A-Za-z0-9_.-]", "_", run.run_id)
        figure = figures.steps_over_time(run)
        images.append(_image(name, f"Engine steps over time: {run.label}", figure, caption))
    return images


def _image(name: str, title: str, figure: Figure, caption: str = "") -> FigureImage:
    from reports.figures import display_width_px, png_bytes

    return FigureImage(
        name=name,
        title=title,
        png=png_bytes(figure),
        caption=caption,
        width_px=display_width_px(figure),
    )
