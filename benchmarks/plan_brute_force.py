"""A plan's answer against brute force: every configuration at every replica count.

For a `cheapest` plan, simulates each configuration of `plan.space` at 1, 2, ..., K
replicas (no search, no cost bound), takes the fewest passing per configuration and the
cheapest overall, and compares with what `workbench plan` answers (its search, bounds and
early stops). Probes here stop early too (`--no-early-stop` to run them whole): that a
stopped probe would have failed anyway is tested on its own (tests/test_plan_monitor.py).

    python benchmarks/plan_brute_force.py scenarios/plan_llama3_70b.yaml --max-replicas 32
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from simulator.catalogs.hardware import get_gpu
from workbench.errors import WorkbenchError
from workbench.planning.answer import best_configuration
from workbench.planning.executor import build_executor
from workbench.planning.planner import Planner
from workbench.planning.probe import probe_scenario, run_probe
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore

SIMULATIONS = [0]  # probes brute force ran


def fewest_replicas(path: Path, values: dict, max_replicas: int, early_stop: bool) -> int | None:
    scenario = load_scenario(path)
    plan = scenario.plan
    for replicas in range(1, max_replicas + 1):
        point = {
            **values,
            "hardware.replicas": replicas,
            "workload.arrival.rate_per_s": plan.objective.rate_per_s,
            "workload.num_requests": plan.requests_per_probe or scenario.workload.num_requests,
        }
        probe = probe_scenario(scenario, point, str(path))
        SIMULATIONS[0] += 1
        _, verdict, refusal, _ = run_probe(
            probe.model_dump_json(), plan.slo.model_dump_json(), early_stop
        )
        if refusal is not None:
            return None
        if verdict.passed:
            return replicas
    return None


def brute_force(path: Path, max_replicas: int, early_stop: bool) -> list[tuple]:
    plan = load_scenario(path).plan
    rows = []
    for index, combo in enumerate(itertools.product(*plan.space.values())):
        values = dict(zip(plan.space, combo, strict=True))
        try:
            replicas = fewest_replicas(path, values, max_replicas, early_stop)
        except WorkbenchError as error:
            print(f"  {index}: {error.one_line()}")
            continue
        hardware = probe_scenario(load_scenario(path), values, str(path)).hardware
        gpus = hardware.tensor_parallel * hardware.pipeline_parallel
        price = plan.objective.prices_usd_per_hour.get(
            hardware.gpu, get_gpu(hardware.gpu).hourly_price_usd
        )
        cost = None if replicas is None else replicas * gpus * price
        rows.append((index, values, replicas, cost))
        print(f"  {index:3d} {values}: {replicas} replicas, ${cost}/h", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--max-replicas", type=int, default=32)
    parser.add_argument("--no-early-stop", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = brute_force(args.scenario, args.max_replicas, not args.no_early_stop)
    brute_s = time.perf_counter() - started
    passing = [r for r in rows if r[3] is not None]
    best = min(passing, key=lambda r: (r[3], r[0])) if passing else None
    scenario = load_scenario(args.scenario)
    with (
        tempfile.TemporaryDirectory() as folder,
        ResultsStore.open(Path(folder) / "p.duckdb") as store,
    ):
        executor = build_executor("local", None, None)
        started = time.perf_counter()
        run = Planner(scenario, str(args.scenario), store, executor).run()
        plan_s = time.perf_counter() - started
        executor.close()
    found = best_configuration(run, scenario.plan)
    print(
        f"brute force: {best and (best[0], best[2], best[3])} in {brute_s:.0f} s, "
        f"{SIMULATIONS[0]} simulations"
    )
    print(
        f"plan:        {found and (found.index, found.answer.replicas)} in {plan_s:.0f} s, "
        f"{run.probes_run} simulations"
    )
    same = (
        best is not None
        and found is not None
        and (best[0], best[2]) == (found.index, found.answer.replicas)
    )
    print("same answer" if same else "DIFFERENT ANSWERS")


if __name__ == "__main__":
    main()
