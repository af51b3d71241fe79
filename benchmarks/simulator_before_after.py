"""Simulator speed on the quickstart, for a before/after comparison across checkouts.

Runs `simulate` on a tree's own `scenarios/quickstart.yaml` at 20 req/s, with optional
overrides; point PYTHONPATH at another checkout (a `git worktree`) to time that code:

    python benchmarks/simulator_before_after.py . 200000 "cost_model={kind: roofline}"
    (cd /tmp/before && PYTHONPATH=. python /path/to/benchmarks/simulator_before_after.py . 200000)

`simulator_speed_against.py REV` does the checkout and the interleaved rounds in one command.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from simulator.run import simulate
from workbench.scenario.loader import load_scenario
from workbench.workload.generate import generate_workload

root, n, extra = Path(sys.argv[1]).resolve(), int(sys.argv[2]), sys.argv[3:]
overrides = [f"workload.num_requests={n}", "workload.arrival.rate_per_s=20", *extra]
scenario = load_scenario(root / "scenarios" / "quickstart.yaml", overrides)
workload = generate_workload(scenario.workload, scenario.seed)
started = time.perf_counter()
records = simulate(scenario, workload)
seconds = time.perf_counter() - started
print(
    f"{root.name} {scenario.cost_model.kind} {n} requests: simulate {seconds:.2f} s "
    f"({n / seconds:,.0f} req/s), steps {len(records.steps.step)}"
)
