"""Build a comparison report (HTML + Markdown + PNGs) from the results database alone."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from reports.collect import RunData, collect_run
from reports.content import FigureImage, Report, Table
from reports.decoders import decoder_tables, sim_vs_real_table
from reports.html import render_html
from reports.markdown import render_markdown
from reports.tables import latency_table, overview_table, seqsched_table
from workbench.errors import WorkbenchError
from workbench.store import ResultsStore

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def build_report(store: ResultsStore, run_ids: list[str] | None, out_dir: Path) -> Path:
    """Write out_dir/report.html (self-contained), out_dir/report.md and its PNGs.

    run_ids: full ids or unique prefixes; None reports every run. Returns the HTML path.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed; selected here, not when reports is imported
    runs = [collect_run(store, run_id) for run_id in _resolve(store, run_ids)]
    report = Report(
        title="Decoding workbench report",
        facts=[
            ("Database", store.path),
            ("Runs", str(len(runs))),
            ("Generated", datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")),
        ],
        tables=_tables(runs),
        figures=_figures(runs),
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for figure in report.figures:
        (out_dir / f"{figure.name}.png").write_bytes(figure.png)
    (out_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
    html_path = out_dir / "report.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    return html_path


def _resolve(store: ResultsStore, run_ids: list[str] | None) -> list[str]:
    if run_ids is None:
        ids = [str(run["run_id"]) for run in store.list_runs()]
    else:
        ids = list(dict.fromkeys(store.resolve_run_id(run_id) for run_id in run_ids))
    if not ids:
        raise WorkbenchError("no runs to report", source=store.path)
    return ids


def _tables(runs: list[RunData]) -> list[Table]:
    tables = [overview_table(runs), latency_table(runs)]
    batched = [run for run in runs if run.batches is not None]
    if batched:
        tables.append(seqsched_table(batched))
    tables += decoder_tables(runs)
    twins = sim_vs_real_table(runs)
    if twins is not None:
        tables.append(twins)
    return tables


def _figures(runs: list[RunData]) -> list[FigureImage]:
    from reports import figures  # imports matplotlib, after the backend is chosen

    images = [
        _image(f"cdf_{metric}", f"{metric.upper()} CDF", figures.latency_cdf(runs, metric))
        for metric in ("ttft", "tpot", "e2e")
    ]
    images.append(_image("throughput", "Throughput and goodput", figures.throughput_bars(runs)))
    batched = [run for run in runs if run.batches is not None]
    if batched:
        figure = figures.batch_length_vs_useful(batched)
        images.append(_image("batch_lengths", "Batch length against useful tokens", figure))
    groups = figures.sweep_groups(runs)
    if groups:
        images.append(_image("rate_sweep", "Sweep over arrival rate", figures.rate_sweep(groups)))
    for index, run in enumerate(runs):
        caption = "Time-binned means (at most 5000 points per run)."
        if run.replicas_total > len(run.step_series):
            caption += f" First {len(run.step_series)} of {run.replicas_total} replicas shown."
        name = f"steps_{index:02d}_" + re.sub(r"[^A-Za-z0-9_.-]", "_", run.run_id)
        figure = figures.steps_over_time(run)
        images.append(_image(name, f"Engine steps over time: {run.run_id}", figure, caption))
    return images


def _image(name: str, title: str, figure: Figure, caption: str = "") -> FigureImage:
    from reports.figures import png_bytes

    return FigureImage(name=name, title=title, png=png_bytes(figure), caption=caption)
