"""Simulator speed: simulated requests per wall second on one loaded replica.

Opt-in (not part of the test suite). Runs the quickstart model and lengths (Llama-3-8B on
one H100, continuous batching with chunked prefill, Azure conversation lengths) with
Poisson arrivals at a rate that keeps the replica busy (mean batch ~85), for each request
count given, through the whole path: workload, simulation, metrics, DuckDB write.

    python benchmarks/simulator_speed.py 100000 1000000 [--rate 20] [--step-by-step]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from simulator.run import simulate
from workbench.metrics import summarize
from workbench.runner import run_point
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore
from workbench.sweep import SweepPoint
from workbench.workload.generate import generate_workload

QUICKSTART = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"


def measure(num_requests: int, rate: float, bulk: bool) -> dict[str, float]:
    overrides = [
        f"workload.num_requests={num_requests}",
        f"workload.arrival.rate_per_s={rate}",
        f"simulator.bulk_steps={str(bulk).lower()}",
    ]
    scenario = load_scenario(QUICKSTART, overrides)
    t0 = time.perf_counter()
    workload = generate_workload(scenario.workload, scenario.seed)
    t1 = time.perf_counter()
    records = simulate(scenario, workload)
    t2 = time.perf_counter()
    summary = summarize(records, scenario.slo)
    t3 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ResultsStore.open(Path(tmp) / "b.duckdb") as store:
        t4 = time.perf_counter()
        run_point(SweepPoint({}, scenario), store)  # the CLI path end to end, into a file
        t5 = time.perf_counter()
    return {
        "requests": num_requests,
        "steps": len(records.steps.step),
        "mean_batch": summary["mean_batch_size"],
        "workload_s": t1 - t0,
        "simulate_s": t2 - t1,
        "sim_req_per_s": num_requests / (t2 - t1),
        "summarize_s": t3 - t2,
        "end_to_end_s": t5 - t4,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("counts", nargs="+", type=int, help="request counts to simulate")
    parser.add_argument("--rate", type=float, default=20.0, help="Poisson rate, req/s")
    parser.add_argument("--step-by-step", action="store_true", help="bulk stepping off")
    args = parser.parse_args()
    for n in args.counts:
        r = measure(n, args.rate, bulk=not args.step_by_step)
        print(
            f"{r['requests']:>9,} requests  {r['steps']:>10,} steps  batch {r['mean_batch']:.1f}"
            f"  workload {r['workload_s']:.2f}s  simulate {r['simulate_s']:.2f}s"
            f" ({r['sim_req_per_s']:,.0f} req/s)  summarize {r['summarize_s']:.2f}s"
            f"  run+write (CLI path) {r['end_to_end_s']:.2f}s",
            flush=True,
        )


if __name__ == "__main__":
    main()
