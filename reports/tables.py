"""Summary tables: one row per run, cells formatted from `workbench.metrics.summarize`.

Rows are named by the run's label (`reports.labels`), its id the row's tooltip; the runs
table lists every label with its id. Tables stay narrow: one per latency metric.
"""

from __future__ import annotations

from collections.abc import Callable

from reports.collect import RunData
from reports.content import Table
from workbench.metrics import SummaryValue

MISSING = "–"
SATURATED_MARK = "⚠"
LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}
LATENCY_STATS = (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"))
Column = tuple[str, Callable[[RunData], str]]


def format_number(value: SummaryValue, decimals: int = 2) -> str:
    """Fixed decimals for floats, plain integers, a dash for an undefined metric."""
    if value is None or isinstance(value, str):
        return MISSING if value is None else value
    if isinstance(value, int):
        return str(value)
    return f"{value:.{decimals}f}"


def run_name(run: RunData) -> str:
    """The run's label, marked when the run saturated."""
    return f"{run.label} {SATURATED_MARK}" if run.saturated else run.label


def _summary_cell(key: str, decimals: int) -> Callable[[RunData], str]:
    return lambda run: format_number(run.summary.get(key), decimals)


def _completed(run: RunData) -> str:
    return f"{run.summary['completed']}/{run.summary['num_requests']}"


def runs_table(runs: list[RunData]) -> Table:
    columns: list[Column] = [
        ("Run", run_name),
        ("Id", lambda run: run.run_id),
        ("Scenario", lambda run: str(run.run["scenario_name"])),
        ("Backend", lambda run: str(run.run["backend"])),
        ("Scheduler", lambda run: str(run.run["scheduler"])),
        ("Decoder", lambda run: str(run.run["decoder"])),
        ("Hardware", lambda run: run.hardware),
        ("Completed", _completed),
    ]
    return _table(
        "Runs",
        columns,
        runs,
        text_columns=7,
        note="Run: what tells the run apart from the others here (the configuration values "
        f"that differ, and its --label). {SATURATED_MARK}: saturated (see the warnings).",
    )


def throughput_table(runs: list[RunData]) -> Table:
    columns: list[Column] = [
        ("Run", run_name),
        ("Req/s", _summary_cell("request_throughput", 3)),
        ("Goodput req/s", _summary_cell("request_goodput", 3)),
        ("Output tok/s", _summary_cell("output_throughput", 1)),
        ("Tokens/emission", _summary_cell("mean_tokens_per_emission", 2)),
        ("Mean batch", _summary_cell("mean_batch_size", 1)),
        ("Preemptions", _summary_cell("preemptions", 0)),
    ]
    return _table(
        "Throughput",
        columns,
        runs,
        note="Throughput = completed requests (tokens) / (last finish − first arrival); goodput "
        "counts completed requests meeting every SLO of the run's scenario (– without SLOs).",
    )


def latency_tables(runs: list[RunData]) -> list[Table]:
    """One narrow table per latency: mean, p50, p90, p99 (ms) and n."""
    tables = []
    for metric, name in LATENCY_NAMES.items():
        columns: list[Column] = [("Run", run_name)]
        for header, stat in LATENCY_STATS:
            columns.append((header, _summary_cell(f"{stat}_{metric}_ms", 2)))
        columns.append(("n", _summary_cell(f"n_{metric}", 0)))
        tables.append(_table(f"{name} (ms)", columns, runs, note=_LATENCY_NOTES[metric]))
    return tables


_LATENCY_NOTES = {
    "ttft": "Time to first token of completed requests; percentiles interpolate linearly "
    "(DuckDB quantile_cont); n = samples.",
    "tpot": "Time per output token after the first, per request; one-token requests excluded.",
    "itl": "Gaps between a request's emissions; a multi-token step's tokens arrive together "
    "(one gap).",
    "e2el": "Arrival to last token.",
}


SEQSCHED_COLUMNS: list[Column] = [
    ("Run", run_name),
    ("Scenario", lambda run: str(run.run["scenario_name"])),
    ("Cost model", lambda run: run.cost_model),
    ("Samples/s", _summary_cell("request_throughput", 3)),
    ("Avg batch length", _summary_cell("avg_batch_length", 1)),
    ("Effective tokens (paper)", _summary_cell("effective_token_ratio_paper", 3)),
    ("Effective tokens", _summary_cell("effective_token_ratio", 3)),
    ("FCR ratio", _summary_cell("fcr_ratio", 3)),
    ("Decode iterations", _summary_cell("decode_iterations", 0)),
]


def seqsched_table(runs: list[RunData]) -> Table:
    """The sequence-scheduling paper's metrics, for runs of static-batch schedulers."""
    return _table(
        "Sequence scheduling (static batches)",
        SEQSCHED_COLUMNS,
        runs,
        text_columns=3,
        note="Effective tokens = useful output tokens / computed token slots (padding "
        "included). The paper counts each request once, in its final batch; the other column "
        "also counts the wasted first attempt of FCR failures. Avg batch length: per sample, "
        "in steps. Decode iterations: engine steps, prefill steps included.",
    )


def _table(
    title: str, columns: list[Column], runs: list[RunData], *, text_columns: int = 1, note: str = ""
) -> Table:
    return Table(
        title=title,
        headers=[header for header, _ in columns],
        rows=[[cell(run) for _, cell in columns] for run in runs],
        note=note,
        text_columns=text_columns,
        row_titles=[f"run {run.run_id}" for run in runs],
    )
