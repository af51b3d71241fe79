"""The report's decoder tables: speed-up over vanilla, categories, simulator vs real."""

from __future__ import annotations

from pathlib import Path

from burst_records import sequential_run, speculative_meta
from fixtures_records import make_meta
from scenario_helpers import SCENARIOS

from reports.build import build_report
from simulator.run import simulate
from workbench.runner import run_scenario
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore

SMALL = ["workload.num_requests=30"]


def test_decoder_runs_get_speedup_and_sim_vs_real_tables(tmp_path: Path) -> None:
    path = SCENARIOS / "speculative_sim.yaml"
    spec = load_scenario(path, SMALL)
    vanilla = load_scenario(path, [*SMALL, "decoder={kind: vanilla}"])
    real = load_scenario(path, [*SMALL, "backend=real"])
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        (spec_run,) = run_scenario(spec, store, source=str(path))
        (vanilla_run,) = run_scenario(vanilla, store, source=str(path))
        real_meta = make_meta(
            "real01", config=real.model_dump(mode="json"), backend="real",
            decoder="speculative", scenario_name=real.name,
        )  # fmt: skip
        store.write_run(real_meta, simulate(spec))  # stands in for a real run's records
        build_report(store, None, tmp_path / "out")
    markdown = (tmp_path / "out" / "report.md").read_text()
    spec_label, vanilla_label = (
        _label(markdown, spec_run.run_id),
        _label(markdown, vanilla_run.run_id),
    )
    assert (spec_label, vanilla_label) == ("sim · speculative k=4", "sim · vanilla")
    speedup = _section(markdown, "Multi-token decoders: speed-up over vanilla")
    header = next(line for line in speedup if line.startswith("| Run"))
    row = next(line for line in speedup if line.startswith(f"| {spec_label} |"))
    cell = dict(zip(_cells(header), _cells(row), strict=True))
    assert cell["Vanilla run"] == vanilla_label  # matched as the baseline
    # Multi-token steps deliver several tokens at once: gaps between emissions exceed TPOT.
    assert float(cell["Mean ITL (ms)"]) > 1.5 * float(cell["Mean TPOT (ms)"])
    twins = _section(markdown, "Simulator vs real")
    real_label = _label(markdown, "real01")
    twin_row = next(line for line in twins if line.startswith(f"| {real_label} |"))
    assert _cells(twin_row)[1:3] == [spec_label, f"{spec.cost_model.kind} (uncalibrated)"]
    assert "by prompt category" not in markdown  # synthetic prompts carry no category
    warnings = _section(markdown, "Warnings")
    assert any(f"{spec_label} simulates {real_label}" in line for line in warnings)


def test_categories_get_their_own_table(tmp_path: Path) -> None:
    records = sequential_run([8] * 6, lambda room: room, k=4, category=["qa", "math"] * 3)
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        store.write_run(speculative_meta("cat01", k=4), records)
        build_report(store, None, tmp_path / "out")
    markdown = (tmp_path / "out" / "report.md").read_text()
    rows = _section(markdown, "by prompt category")
    label = _label(markdown, "cat01")
    assert sum(line.startswith(f"| {label} | speculative | ") for line in rows) == 2


def _section(markdown: str, title: str) -> list[str]:
    """The table lines under the first heading containing `title`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## ") and title in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), None)
    return lines[start + 1 : end]


def _label(markdown: str, run_id: str) -> str:
    """A run's label: the first cell of its row in the runs table (its id second)."""
    rows = _section(markdown, "Runs")
    return next(_cells(row)[0] for row in rows if row.startswith("| ") and _cells(row)[1] == run_id)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]
