"""A simulated twin's own spread: each real run's twin simulated again with other draw seeds.

A twin's error against its real run carries the simulator's own sampling (a multi-token
decoder's accepted tokens, request types and candidates): one `workbench run --backend both`
draws once. This simulates each real run's stored twin (or, with `--matched`, its
speed-matched twin) again with `simulator.draw_seed` 1..N over the same request stream and
prints, per latency metric, the mean and the standard deviation over the draws of sim / real
− 1 (the twins' median, p90 and p99 of TTFT, TPOT and E2E, computed as `workbench run`
computes them). Nothing is stored. Seconds per real run on 2 cores for 20 seeds of a lookahead
twin of 150 requests.

    python benchmarks/twin_spread.py --db la.duckdb --seeds 20 --label held-out
    python benchmarks/twin_spread.py --db la.duckdb --seeds 20 --label held-out --matched
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from reports.collect import collect_run
from reports.matching import simulator_twin, speed_matched_twin
from simulator.twin_draws import latency_quantiles, redrawn
from workbench.runner import with_model_source
from workbench.scenario.loader import validate_scenario
from workbench.scenario.scenario import Scenario
from workbench.store.db import ResultsStore

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def twin_scenario(store: ResultsStore, run_id: str) -> Scenario:
    config = json.loads(store.get_run(run_id)["config_json"])
    source = f"run {run_id}"
    return with_model_source(validate_scenario(config, source=source, base_dir=SCENARIOS))


def spread(store: ResultsStore, real_id: str, twin_id: str, seeds: int) -> dict[str, np.ndarray]:
    """(seeds,) errors sim / real − 1 per metric, one per draw seed 1..seeds."""
    real = latency_quantiles(store.load_records(real_id))
    drawn = redrawn(twin_scenario(store, twin_id), store, range(1, seeds + 1))
    return {name: values / real[name] - 1.0 for name, values in drawn.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--label", default="", help="only real runs whose label contains this")
    parser.add_argument("--matched", action="store_true", help="the speed-matched twins")
    args = parser.parse_args()
    pick = speed_matched_twin if args.matched else simulator_twin
    with ResultsStore.open(args.db, read_only=True) as store:
        listed = store.list_runs()
        runs = [collect_run(store, r["run_id"]) for r in listed]
        for run, real in zip(listed, runs, strict=True):
            if run["backend"] != "real" or args.label not in (run.get("label") or ""):
                continue
            twin = pick(real, runs)
            if twin is None:
                print(f"{run.get('label')} (real {real.run_id[:8]}): no twin in the database")
                continue
            errors = spread(store, real.run_id, twin.run_id, args.seeds)
            cells = [f"{k} {100 * v.mean():+.1f}±{100 * v.std():.1f}" for k, v in errors.items()]
            head = f"{run.get('label')} (real {real.run_id[:8]}, twin {twin.run_id[:8]})"
            print(f"{head}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
