"""Summary tables: one row per run, cells formatted from `workbench.metrics.summarize`."""

from __future__ import annotations

from collections.abc import Callable

from reports.collect import RunData
from reports.content import Table
from workbench.metrics import Number

MISSING = "–"
LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}
LATENCY_STATS = (("mean", "mean"), ("p50", "median"), ("p99", "p99"))


def format_number(value: Number, decimals: int = 2) -> str:
    """Fixed decimals for floats, plain integers, a dash for an undefined metric."""
    if value is None:
        return MISSING
    if isinstance(value, int):
        return str(value)
    return f"{value:.{decimals}f}"


def _summary_cell(key: str, decimals: int) -> Callable[[RunData], str]:
    return lambda run: format_number(run.summary.get(key), decimals)


def _completed(run: RunData) -> str:
    return f"{run.summary['completed']}/{run.summary['num_requests']}"


# (header, cell) in column order.
OVERVIEW_COLUMNS: list[tuple[str, Callable[[RunData], str]]] = [
    ("Run", lambda run: run.run_id),
    ("Scenario", lambda run: str(run.run["scenario_name"])),
    ("Backend", lambda run: str(run.run["backend"])),
    ("Scheduler", lambda run: str(run.run["scheduler"])),
    ("Decoder", lambda run: str(run.run["decoder"])),
    ("Hardware", lambda run: run.hardware),
    ("Completed", _completed),
    ("Req/s", _summary_cell("request_throughput", 3)),
    ("Output tok/s", _summary_cell("output_throughput", 1)),
    ("Goodput req/s", _summary_cell("request_goodput", 3)),
    ("Tokens/emission", _summary_cell("mean_tokens_per_emission", 2)),
    ("Mean batch", _summary_cell("mean_batch_size", 1)),
    ("Preemptions", _summary_cell("preemptions", 0)),
]


def _latency_columns() -> list[tuple[str, Callable[[RunData], str]]]:
    columns: list[tuple[str, Callable[[RunData], str]]] = [("Run", lambda run: run.run_id)]
    for metric, name in LATENCY_NAMES.items():
        for header, stat in LATENCY_STATS:
            columns.append((f"{name} {header}", _summary_cell(f"{stat}_{metric}_ms", 2)))
        columns.append((f"{name} n", _summary_cell(f"n_{metric}", 0)))
    return columns


LATENCY_COLUMNS = _latency_columns()


def overview_table(runs: list[RunData]) -> Table:
    return Table(
        title="Runs",
        headers=[header for header, _ in OVERVIEW_COLUMNS],
        rows=[[cell(run) for _, cell in OVERVIEW_COLUMNS] for run in runs],
        text_columns=6,
        note="Throughput = completed requests (tokens) / (last finish − first arrival); goodput "
        "counts completed requests meeting every SLO of the run's scenario (– without SLOs).",
    )


def latency_table(runs: list[RunData]) -> Table:
    return Table(
        title="Latency (ms)",
        headers=[header for header, _ in LATENCY_COLUMNS],
        rows=[[cell(run) for _, cell in LATENCY_COLUMNS] for run in runs],
        note="Completed requests; percentiles interpolate linearly (DuckDB quantile_cont); "
        "n = samples. TPOT excludes one-token requests; ITL counts one gap per emission.",
    )


SEQSCHED_COLUMNS: list[tuple[str, Callable[[RunData], str]]] = [
    ("Run", lambda run: run.run_id),
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
    return Table(
        title="Sequence scheduling (static batches)",
        headers=[header for header, _ in SEQSCHED_COLUMNS],
        rows=[[cell(run) for _, cell in SEQSCHED_COLUMNS] for run in runs],
        text_columns=3,
        note="Effective tokens = useful output tokens / computed token slots (padding "
        "included). The paper counts each request once, in its final batch; the other column "
        "also counts the wasted first attempt of FCR failures. Avg batch length: per sample, "
        "in steps. Decode iterations: engine steps, prefill steps included.",
    )
