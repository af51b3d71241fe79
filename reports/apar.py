"""Tables for APAR runs: branches, steps and KV saved; APAR against its twin without forks;
and the simulator beside the real run.

A run's *twin without forks* has the same configuration but `decoder.max_branches: 1`: on
the simulator the same answers decoded sequentially (vanilla decoding of the same text),
on the real backend the same model with its fork token banned (it writes another text).
A real run's simulator twin is paired as for every decoder (`reports.matching`).
"""

from __future__ import annotations

import copy

from reports.collect import RunData
from reports.content import Table
from reports.matching import BASELINE_IGNORED, config_key, twin_pairs
from reports.tables import MISSING, format_number, run_name
from workbench.metrics import Number

BRANCH_KEYS = (
    ("forks: share of requests", "apar_fork_rate", 2),
    ("branches / request", "apar_branches_per_request", 2),
    ("answer tokens / step", "apar_step_compression", 2),
    ("live branches / step", "apar_mean_live_branches", 2),
    ("KV token-steps saved", "apar_kv_token_steps_saved_share", 2),
    ("attention keys saved", "apar_attention_keys_saved_share", 2),
)


def apar_tables(runs: list[RunData]) -> list[Table]:
    apar = [run for run in runs if run.summary.get("apar_fork_rate") is not None]
    if not apar:
        return []
    forking = [run for run in apar if _max_branches(run) > 1]
    tables = [branch_table(apar)]
    if forking:
        tables.append(twin_table(forking, apar))
    pairs = [(real, sim) for real, sim in twin_pairs(runs) if real in apar]
    if pairs:
        tables.append(sim_beside_real(pairs))
    return tables


def branch_table(apar: list[RunData]) -> Table:
    rows = [
        [run_name(run), str(run.run["backend"]), str(_max_branches(run))]
        + [format_number(run.summary.get(key), digits) for _, key, digits in BRANCH_KEYS]
        + [format_number(run.summary.get("preemptions"), 0), _swap_outs(run)]
        for run in apar
    ]
    titles = [title for title, _, _ in BRANCH_KEYS]
    return Table(
        title="APAR: branches, steps and KV",
        headers=["run", "backend", "max branches", *titles, "preemptions", "swapped out"],
        rows=rows,
        note="Answer tokens / step: the reassembled answer's tokens (fork tokens and EOS left "
        "out) over the steps the request emitted in (a sequential answer: just under 1). "
        "Saved: against a sequential answer of the same text (workbench/metrics/apar.py). "
        "Swapped out: preemptions that moved a request with several live branches to host "
        "memory rather than recomputing it (vLLM's rule; docs/apar.md).",
        text_columns=2,
    )


def _swap_outs(run: RunData) -> str:
    """Requests swapped out, from the run's info (runs stored before swapping have none)."""
    value = (run.run.get("info") or {}).get("apar_swap_outs")
    return MISSING if value is None else str(value)


def twin_table(forking: list[RunData], apar: list[RunData]) -> Table:
    rows = []
    for run in forking:
        twin = without_forks(run, apar)
        t = twin.summary if twin is not None else {}
        s = run.summary
        rows.append(
            [
                run_name(run),
                twin.label if twin is not None else MISSING,
                format_number(_ratio(s.get("request_throughput"), t.get("request_throughput")), 2),
                format_number(_ratio(s.get("median_e2el_ms"), t.get("median_e2el_ms")), 2),
                format_number(_ratio(s.get("p99_e2el_ms"), t.get("p99_e2el_ms")), 2),
                format_number(_ratio(s.get("median_ttft_ms"), t.get("median_ttft_ms")), 2),
                format_number(
                    _ratio(s.get("apar_step_compression"), t.get("apar_step_compression")), 2
                ),
            ]
        )
    return Table(
        title="APAR against its twin without forks",
        headers=[
            "run",
            "twin (max_branches 1)",
            "throughput ×",
            "p50 E2E ×",
            "p99 E2E ×",
            "p50 TTFT ×",
            "answer tokens / step ×",
        ],
        rows=rows,
        note="Ratios APAR / twin (requests per second; latencies: below 1 is faster). On the "
        "simulator the twin decodes the same answers sequentially; on the real backend it is "
        "the same model with its fork token banned, which writes a different text.",
        text_columns=2,
    )


def sim_beside_real(pairs: list[tuple[RunData, RunData]]) -> Table:
    keys = [(title, key, 2) for title, key, _ in BRANCH_KEYS[:4]] + [
        ("p50 E2E (ms)", "median_e2el_ms", 1),
        ("p50 TTFT (ms)", "median_ttft_ms", 1),
        ("requests / s", "request_throughput", 3),
    ]
    rows = []
    for real, sim in pairs:
        for title, key, digits in keys:
            rows.append(
                [
                    run_name(real),
                    title,
                    format_number(real.summary.get(key), digits),
                    format_number(sim.summary.get(key), digits),
                ]
            )
    return Table(
        title="APAR: the simulator beside the real run",
        headers=["real run", "metric", "real", "simulated"],
        rows=rows,
        note="The simulator replays the real run's request trees (decoder.calibrate_from) or "
        "draws its own; its step times come from its cost model, calibrated or not.",
        text_columns=2,
    )


def without_forks(run: RunData, runs: list[RunData]) -> RunData | None:
    """The latest run of the same configuration but max_branches 1."""
    wanted = copy.deepcopy(run.config)
    wanted.setdefault("decoder", {})["max_branches"] = 1
    key = config_key(wanted, (*BASELINE_IGNORED[:1], "slo", "sweep", "simulator"))
    matches = [
        other
        for other in runs
        if other.run["backend"] == run.run["backend"]
        and config_key(other.config, ("name", "slo", "sweep", "simulator")) == key
    ]
    return matches[-1] if matches else None


def _max_branches(run: RunData) -> int:
    return int(run.config.get("decoder", {}).get("max_branches", 16))


def _ratio(numerator: Number, denominator: Number) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return float(numerator) / float(denominator)
