"""The report's APAR section: branches and KV saved, APAR against its twin without forks,
and the simulator beside a real run."""

from __future__ import annotations

import re
from pathlib import Path

from fixtures_records import make_meta
from scenario_helpers import SCENARIOS

from reports.build import build_report
from simulator.run import simulate
from workbench.runner import run_scenario
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore

SMALL = ["workload.num_requests=120", "sweep=null", "workload.arrival.rate_per_s=8"]


def _section(markdown: str, title: str) -> list[list[str]]:
    body = markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ") and "---" not in line]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def test_apar_runs_get_their_tables(tmp_path: Path) -> None:
    path = SCENARIOS / "apar_sim.yaml"
    apar = load_scenario(path, SMALL)
    twin = load_scenario(path, [*SMALL, "decoder.max_branches=1"])
    real = load_scenario(path, [*SMALL, "backend=real"])
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        (apar_run,) = run_scenario(apar, store, source=str(path))
        run_scenario(twin, store, source=str(path))
        meta = make_meta(
            "real01",
            config=real.model_dump(mode="json"),
            backend="real",
            decoder="apar",
            scenario_name=real.name,
        )
        store.write_run(meta, simulate(apar))  # stands in for a real run's records
        build_report(store, None, tmp_path / "out")
    markdown = (tmp_path / "out" / "report.md").read_text()
    branches = _section(markdown, "APAR: branches, steps and KV")
    assert len(branches) == 3
    forking = [row for row in branches if row[2] == "16"]
    assert all(float(row[5]) > 1.3 for row in forking)  # answer tokens per step
    assert all(float(row[7]) > 0 for row in forking)  # KV saved
    [row] = [r for r in _section(markdown, "APAR against its twin without forks") if r[1] != "–"]
    assert float(row[3]) < 1  # a lower p50 E2E than the sequential twin
    assert float(row[6]) > 1.3
    sim_real = _section(markdown, "APAR: the simulator beside the real run")
    assert {r[1] for r in sim_real} >= {"answer tokens / step", "p50 E2E (ms)"}
    compression = next(r for r in sim_real if r[1] == "answer tokens / step")
    assert compression[2] == compression[3]  # the stand-in real run is the same simulation
    assert re.search(apar_run.run_id, markdown)


def test_the_branch_table_counts_swapped_requests(tmp_path: Path) -> None:
    """Under KV pressure the table shows the preemptions and how many of them swapped."""
    path = SCENARIOS / "apar_sim.yaml"
    tight = load_scenario(path, [*SMALL, "scheduler.kv_cache.num_blocks=120"])
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        (run,) = run_scenario(tight, store, source=str(path))
        info = store.get_run(run.run_id)["info"]
        build_report(store, None, tmp_path / "out")
    [row] = _section((tmp_path / "out" / "report.md").read_text(), "APAR: branches, steps and KV")
    preemptions, swapped = int(row[-2]), int(row[-1])
    assert 0 < swapped < preemptions  # requests with one live branch still recompute
    assert swapped == int(info["apar_swap_outs"])


def test_a_speculating_apar_twin_matches_whatever_its_simulated_acceptance() -> None:
    from reports.matching import TWIN_IGNORED, config_key

    def config(acceptance: dict) -> dict:
        speculative = {"num_speculative_tokens": 4, "acceptance": acceptance}
        return {"model": {"name": "m"}, "decoder": {"kind": "apar", "speculative": speculative}}

    real, sim = config({"kind": "iid", "rate": 0.7}), config({"kind": "iid", "rate": 0.4})
    assert config_key(real, TWIN_IGNORED) == config_key(sim, TWIN_IGNORED)
    other = config({"kind": "iid", "rate": 0.7})
    other["decoder"]["speculative"]["num_speculative_tokens"] = 2
    assert config_key(real, TWIN_IGNORED) != config_key(other, TWIN_IGNORED)
