"""The pipeline section of a report: PipeInfer beside synchronous speculative decoding and
plain pipelined decoding over the same stages (decoder kinds `pipeline`, `pipeinfer`).

Runs are compared with the plain pipelined run of the same configuration but for the
decoder (`reports.matching`); the table shows generation speed, latency and what the
pipeline did with its runs (launched, committed, cancelled, stage time wasted on runs that
did not commit, runs in flight).
"""

from __future__ import annotations

from reports.collect import RunData
from reports.content import Table
from reports.matching import BASELINE_IGNORED, config_key
from reports.tables import MISSING, format_number, run_name


def pipeline_tables(runs: list[RunData]) -> list[Table]:
    piped = [run for run in runs if "pipeline_runs_launched" in run.summary]
    return [_policies_table(piped)] if piped else []


def _plain_twin(run: RunData, runs: list[RunData]) -> RunData | None:
    """The latest plain pipelined run of the same configuration but for the decoder."""
    key = config_key(run.config, BASELINE_IGNORED)
    twins = [
        other
        for other in runs
        if other.config.get("decoder", {}).get("kind") == "pipeline"
        and config_key(other.config, BASELINE_IGNORED) == key
    ]
    return twins[-1] if twins else None


def _speedup(run: RunData, twin: RunData | None) -> str:
    if twin is None:
        return MISSING
    ours, theirs = run.summary.get("output_throughput"), twin.summary.get("output_throughput")
    return format_number(ours / theirs, 2) if ours and theirs else MISSING


def _policies_table(runs: list[RunData]) -> Table:
    rows = []
    for run in runs:
        s = run.summary
        rows.append([
            run_name(run),
            str(run.run["backend"]),
            format_number(s.get("output_throughput"), 1),
            _speedup(run, _plain_twin(run, runs)),
            format_number(s.get("mean_ttft_ms"), 1),
            format_number(s.get("mean_itl_ms"), 1),
            format_number(s.get("pipeline_runs_launched"), 0),
            format_number(s.get("pipeline_runs_committed"), 0),
            format_number(s.get("pipeline_runs_cancelled"), 0),
            format_number(s.get("pipeline_wasted_share"), 2),
            format_number(s.get("pipeline_mean_runs_in_flight"), 2),
        ])  # fmt: skip
    return Table(
        title="Pipeline stages: PipeInfer, synchronous speculative, plain pipelining",
        headers=[
            "Run",
            "Backend",
            "Output tok/s",
            "vs plain pipeline",
            "Mean TTFT (ms)",
            "Mean ITL (ms)",
            "Runs",
            "Committed",
            "Cancelled",
            "Wasted stage time",
            "Runs in flight",
        ],
        rows=rows,
        text_columns=2,
        note="vs plain pipeline: output tokens per second over the plain pipelined run of the "
        "same configuration. Wasted stage time: the share of the stages' compute spent on "
        "runs that did not commit (whole, or abandoned between layers when cancelled). Runs "
        "in flight: time-weighted mean between launch and return.",
    )
