"""The CLI around results: `summary` re-prints a stored run, percentiles, sweep progress and
JSON lines, skipped points, labels and re-runs, `show --explain`, the clock line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from workbench.cli import main
from workbench.runner import run_scenario
from workbench.scenario.loader import load_scenario
from workbench.store import ResultsStore

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SMALL = ["--set", "workload.num_requests=150"]
RATE = "workload.arrival.rate_per_s"


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out, captured.err


def _sweep(tmp_path: Path, rates: list[float]) -> Path:
    data = yaml.safe_load(QUICKSTART.read_text())
    data["workload"]["num_requests"] = 150
    trace = (QUICKSTART.parent / data["workload"]["lengths_from_trace"]["path"]).resolve()
    data["workload"]["lengths_from_trace"]["path"] = str(trace)
    data["sweep"] = {"grid": {RATE: rates}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_summary_reprints_what_run_printed(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.duckdb"
    out, _ = cli(capsys, "run", QUICKSTART, "--db", db, "--json", *SMALL, "--label", "base")
    printed = json.loads(out)
    again, _ = cli(capsys, "summary", printed["run_id"][:6], "--db", db, "--json")
    assert json.loads(again) == printed
    text, _ = cli(capsys, "summary", printed["run_id"], "--db", db)
    assert f"run {printed['run_id']}  quickstart [base]" in text
    assert "times simulated (cost model:" in text and "wall time" in text


def test_percentiles_are_selectable(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.duckdb"
    out, _ = cli(capsys, "run", QUICKSTART, "--db", db, *SMALL, "--json", "--percentiles", "50,95")
    printed = json.loads(out)
    assert {"p50_ttft_ms", "p95_itl_ms", "median_e2el_ms"} <= set(printed)
    assert "p99_ttft_ms" not in printed
    text, _ = cli(capsys, "summary", printed["run_id"], "--db", db, "--percentiles", "90,99.9")
    header = next(line for line in text.splitlines() if "latency (ms)" in line)
    assert header.split()[2:] == ["mean", "median", "p90", "p99.9", "n"]
    with pytest.raises(SystemExit) as exit_info:
        main(["summary", printed["run_id"], "--db", str(db), "--percentiles", "120"])
    assert exit_info.value.code == 2


def test_sweep_json_lines_carry_the_point_and_skipped_points_say_so(tmp_path: Path, capsys) -> None:
    scenario, db = _sweep(tmp_path, [2, 4]), tmp_path / "r.duckdb"
    out, _ = cli(capsys, "run", scenario, "--db", db, "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["point"], line["points"], line["sweep_point"]) for line in lines] == [
        (1, 2, {RATE: 2}),
        (2, 2, {RATE: 4}),
    ]
    again, _ = cli(capsys, "run", scenario, "--db", db, "--json")
    skipped = [json.loads(line) for line in again.splitlines()]
    assert all(line.pop("skipped") for line in skipped)
    assert skipped == lines  # the stored runs, summaries included
    text, _ = cli(capsys, "run", scenario, "--db", db)
    assert text.splitlines() == [
        f'skipped {{"{RATE}": {rate}}} (point {i}/2): already complete in {db} as run '
        f"{line['run_id']}"
        for i, (rate, line) in enumerate(zip((2, 4), lines, strict=True), start=1)
    ]


def test_progress_names_each_point_closes_each_bar_and_results_come_as_they_finish(
    tmp_path: Path,
) -> None:
    events: list[str] = []

    class Bar:
        def __init__(self, total: int, label: str) -> None:
            events.append(f"open {label} ({total})")

        def update(self, n: int) -> None:
            pass

        def close(self) -> None:
            events.append("close")

    scenario = load_scenario(_sweep(tmp_path, [2, 4]))
    with ResultsStore.open(":memory:") as store:
        run_scenario(
            scenario,
            store,
            source="s",
            progress=Bar,
            on_outcome=lambda outcome: events.append(f"result {outcome.index}"),
        )
    assert events == [
        "open point 1/2 quickstart (150)", "close", "result 1",
        "open point 2/2 quickstart (150)", "close", "result 2",
    ]  # fmt: skip


def test_a_rerun_is_noted_and_labels_tell_runs_apart(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.duckdb"
    first, err = cli(capsys, "run", QUICKSTART, "--db", db, *SMALL, "--no-progress")
    assert err == ""
    second, err = cli(capsys, "run", QUICKSTART, "--db", db, *SMALL, "--label", "again")
    first_id, second_id = first.split()[1], second.split()[1]
    assert f"already holds this configuration of quickstart as run {first_id}" in err
    assert f"stored run {second_id} beside it, labelled 'again'" in err
    _, err = cli(capsys, "run", QUICKSTART, "--db", db, *SMALL)
    assert "and 1 more" in err and "give --label to tell them apart" in err
    listing, _ = cli(capsys, "runs", "--db", db)
    (row,) = [line for line in listing.splitlines() if line.startswith(second_id)]
    assert "again" in row


def test_show_explain_prints_descriptions_beside_values(capsys) -> None:
    out, _ = cli(capsys, "show", QUICKSTART, "--explain", "--set", f"{RATE}=7")
    line = next(line for line in out.splitlines() if line.strip().startswith("rate_per_s:"))
    assert line.strip() == "rate_per_s: 7.0  # Mean arrival rate in requests per second."
    assert out.splitlines()[0].startswith("name: quickstart  # ")


def test_set_help_names_the_dotted_path_syntax(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "dotted path" in help_text and "workload.arrival.rate_per_s=8" in help_text
