"""A simulated twin against several real runs of its scenario: the machine's noise floor.

On a shared machine one real run against its twin cannot tell the model's error from the
machine's: the same scenario served twice, minutes apart, differs by 5-15 %. Run
`workbench run FILE --backend both` a few times (the twin is the same every time: same
workload, same profile), then this prints per metric every real run's value, their median
and spread (largest / smallest − 1), the twin's value, its error against the real median,
and whether that error lies within the real runs' own range. For the per-request latencies
(TTFT, TPOT, E2E) also the value over the real runs' requests pooled, and the twin's error
against it: one distribution of 3 × 600 requests, whose p99 a single burst moves less than
one run's.

    python benchmarks/sim_vs_real_spread.py --db fidelity.duckdb [--twin SIM_RUN_ID]

The twin: the given simulated run, else the latest one paired with a real run (`twin_of`);
the real runs: every completed real run of the same scenario hash as its pair.
"""

from __future__ import annotations

import argparse
import statistics

from reports.collect import collect_run
from reports.sim_vs_real import error, error_rows, format_error
from workbench.store.db import ResultsStore


def twin_id(store: ResultsStore, given: str | None) -> str:
    if given:
        return store.resolve_run_id(given)
    twins = [r for r in store.list_runs() if r["backend"] == "sim" and _twin_of(store, r)]
    if not twins:
        raise SystemExit(f"{store.path}: no simulated twin of a real run")
    return str(twins[-1]["run_id"])


def _twin_of(store: ResultsStore, run: dict) -> str | None:
    info = store.get_run(run["run_id"]).get("info") or {}
    return info.get("twin_of")


def real_runs(store: ResultsStore, twin: str) -> list[str]:
    """Every completed real run of the scenario the twin's pair ran."""
    pair = _twin_of(store, store.get_run(twin))
    if pair is None:
        raise SystemExit(f"{store.path}: run {twin} is not the twin of a real run")
    scenario_hash = store.get_run(pair)["scenario_hash"]
    return [
        str(r["run_id"])
        for r in store.list_runs()
        if r["backend"] == "real" and r["scenario_hash"] == scenario_hash
        and r["status"] == "complete"
    ]  # fmt: skip


# error_rows' labels of the per-request latencies → the request_metrics column.
POOLED_COLUMNS = {"TTFT": "ttft_s", "TPOT": "tpot_s", "E2E": "e2e_s"}
QUANTILES = {"median": 0.5, "p90": 0.9, "p99": 0.99}


def pooled_ms(store: ResultsStore, reals: list[str]) -> dict[str, float]:
    """'TTFT p99 (ms)' → the quantile over every finished request of the real runs."""
    marks = ", ".join("?" for _ in reals)
    pooled = {}
    for name, column in POOLED_COLUMNS.items():
        for stat, q in QUANTILES.items():
            (value,) = store.connection.execute(
                f"SELECT quantile_cont({column}, {q}) * 1000.0 FROM request_metrics "
                f"WHERE run_id IN ({marks}) AND status = 'finished'",
                reals,
            ).fetchone()
            if value is not None:
                pooled[f"{name} {stat} (ms)"] = float(value)
    return pooled


def spread_rows(store: ResultsStore, twin: str, reals: list[str]) -> list[list[str]]:
    sim = collect_run(store, twin)
    pooled = pooled_ms(store, reals)
    per_real = [error_rows(collect_run(store, real), sim) for real in reals]
    rows = []
    for index, (label, _real, sim_value, _decimals) in enumerate(per_real[0]):
        values = [rows_[index][1] for rows_ in per_real]
        if sim_value is None or any(v is None or v <= 0 for v in values):
            continue
        known = [float(v) for v in values if v is not None]
        median = statistics.median(known)
        inside = min(known) <= sim_value <= max(known)
        together = pooled.get(label)
        rows.append(
            [
                label,
                " ".join(f"{v:.4g}" for v in known),
                f"{median:.4g}",
                format_error(max(known) / min(known) - 1),
                f"{sim_value:.4g}",
                format_error(error(sim_value, median)),
                "yes" if inside else "no",
                "" if together is None else f"{together:.4g}",
                "" if together is None else format_error(error(sim_value, together)),
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--twin", help="the simulated run (default: the latest twin)")
    args = parser.parse_args(argv)
    with ResultsStore.open(args.db, read_only=True) as store:
        twin = twin_id(store, args.twin)
        reals = real_runs(store, twin)
        if len(reals) < 2:
            raise SystemExit(f"{args.db}: one real run of the twin's scenario: run it again")
        print(f"twin {twin} against {len(reals)} real runs of its scenario: {', '.join(reals)}")
        headers = [
            "metric", "real runs", "real median", "real spread", "twin", "error", "inside",
            "real pooled", "error vs pooled",
        ]  # fmt: skip
        rows = spread_rows(store, twin, reals)
    print("| " + " | ".join(headers) + " |")
    print("|" + "---|" * len(headers))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
