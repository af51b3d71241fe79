"""`benchmarks/twin_spread.py`: a stored twin drawn again over the same requests."""

from __future__ import annotations

import sys
from pathlib import Path

from scenario_helpers import SCENARIOS

from workbench.cli import main as workbench
from workbench.store.db import ResultsStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from twin_spread import spread


def test_draw_seed_1_reproduces_a_twin_drawn_with_it_and_others_differ(tmp_path: Path) -> None:
    db = tmp_path / "spread.duckdb"
    scenario = str(SCENARIOS / "lookahead_sim.yaml")
    sets = ["--set", "workload.num_requests=30", "--set", "simulator.draw_seed=1"]
    assert workbench(["run", scenario, "--db", str(db), "--no-progress", *sets]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        run_id = store.list_runs()[0]["run_id"]
        errors = spread(store, run_id, run_id, 3)  # the run against itself, draw seeds 1-3
    assert set(errors) == {f"{m} p{q}" for m in ("TTFT", "TPOT", "E2E") for q in (50, 90, 99)}
    assert all(len(e) == 3 and e[0] == 0.0 for e in errors.values())
    assert any(e[1] != 0.0 or e[2] != 0.0 for e in errors.values())
