"""End to end through the `workbench` CLI: run, validate, show, runs, report, export, sweeps."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from workbench.cli import main
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore
from workbench.sweep import expand

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"
SMALL = ["--set", "workload.num_requests=200"]
LATENCY_KEYS = [
    f"{stat}_{metric}"
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
    for stat in ("mean", "median", "p90", "p99")
]
SUMMARY_KEYS = [
    "run_id",
    "completed",
    "duration",
    "request_throughput",
    "output_throughput",
    "request_goodput",
    *LATENCY_KEYS,
]
RATE = "workload.arrival.rate_per_s"


# ---------------------------------------------------------------------- helpers


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the CLI in-process; assert success and return stdout."""
    rc = main([str(a) for a in args])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return captured.out


def run_json(capsys: pytest.CaptureFixture[str], scenario: Path, db: Path, *extra: str) -> dict:
    out = cli(capsys, "run", scenario, "--db", db, "--json", *SMALL, *extra)
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])


def list_runs(db: Path) -> list[dict[str, Any]]:
    with ResultsStore.open(db, read_only=True) as store:
        return store.list_runs()


def sweep_scenario(tmp_path: Path, rates: list[float], name: str = "sweep.yaml") -> Path:
    """The quickstart, 200 requests, with a grid over the arrival rate."""
    data = yaml.safe_load(QUICKSTART.read_text())
    data["workload"]["num_requests"] = 200
    trace = (QUICKSTART.parent / data["workload"]["lengths_from_trace"]["path"]).resolve()
    data["workload"]["lengths_from_trace"]["path"] = str(trace)
    data["sweep"] = {"grid": {RATE: rates}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A database holding one small quickstart run: (db, run_id, the run's stdout)."""
    db = tmp_path_factory.mktemp("one_run") / "results.duckdb"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(QUICKSTART), "--db", str(db), "--no-progress", *SMALL]) == 0
    (run,) = list_runs(db)
    return db, run["run_id"], out.getvalue()


# ---------------------------------------------------------------------- run


def test_run_writes_a_run_and_prints_the_summary(one_run: tuple[Path, str, str]) -> None:
    db, run_id, out = one_run
    assert f"run {run_id}" in out
    assert "quickstart" in out
    assert "completed 200/200" in out
    for label in ("TTFT", "TPOT", "ITL", "E2E"):
        assert label in out
    (run,) = list_runs(db)
    assert run["status"] == "complete"
    assert run["scenario_name"] == "quickstart"
    assert run["sweep_point"] is None


def test_run_json_prints_one_object_with_the_summary_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = run_json(capsys, QUICKSTART, tmp_path / "r.duckdb")
    for key in SUMMARY_KEYS:
        assert key in summary, key
    assert summary["completed"] == 200
    assert summary["duration"] > 0
    assert summary["request_throughput"] > 0
    assert summary["p99_ttft_ms"] >= summary["median_ttft_ms"]
    assert [r["run_id"] for r in list_runs(tmp_path / "r.duckdb")] == [summary["run_id"]]


def test_set_seed_changes_results_and_same_seed_reproduces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.duckdb"
    first = run_json(capsys, QUICKSTART, db, "--set", "seed=7")
    again = run_json(capsys, QUICKSTART, db, "--set", "seed=7")
    other = run_json(capsys, QUICKSTART, db, "--set", "seed=8")
    assert first.pop("run_id") != again.pop("run_id")
    other.pop("run_id")
    assert first == again
    assert first != other
    assert len(list_runs(db)) == 3


def test_set_changes_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = run_json(
        capsys, QUICKSTART, tmp_path / "r.duckdb", "--set", "workload.num_requests=50"
    )
    assert summary["completed"] == 50  # the later --set wins


SIMULATED = [p for p in sorted(SCENARIOS.glob("*.yaml")) if load_scenario(p).model.zoo is None]


@pytest.mark.parametrize("path", SIMULATED, ids=lambda p: p.name)
def test_shipped_scenarios_run_as_is(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = cli(capsys, "run", path, "--db", tmp_path / "r.duckdb", "--json")
    shipped = load_scenario(path)
    points = expand(shipped, source=str(path))
    summaries = [json.loads(line) for line in out.splitlines()]
    assert len(summaries) == len(points)  # one JSON line per sweep point
    for summary in summaries:
        assert summary["num_requests"] == shipped.workload.num_requests
        assert summary["completed"] > 0.8 * shipped.workload.num_requests


# ---------------------------------------------------------------------- validate, show


@pytest.mark.parametrize("path", SIMULATED, ids=lambda p: p.name)
def test_shipped_scenarios_validate(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(capsys, "validate", path)
    assert out.startswith(f"{path}: ok")
    runs = len(expand(load_scenario(path), source=str(path)))
    assert f"{runs} run{'s' * (runs != 1)})" in out


REAL = sorted(set(SCENARIOS.glob("*.yaml")) - set(SIMULATED))


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_scenarios_validate_once_their_zoo_model_is_built(
    path: Path, tiny_zoo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = ["--set", "model.zoo=tiny"]  # the suite builds `tiny` only (`small`: 9 min)
    built = cli(capsys, "validate", path, "--set", f"model.zoo_dir={tiny_zoo}", *tiny)
    assert built.startswith(f"{path}: ok")
    code = main(["validate", str(path), "--set", f"model.zoo_dir={tmp_path}"])
    assert code == 2  # `run` would refuse: validate says so first
    assert "is not built" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hardware.gpu=h100", "unknown GPU 'h100'; did you mean 'h100-sxm'"),
        ("hardware.tensor_parallel=3", "valid degrees: 1, 2, 4, 8, 16, 32"),
        ("workload.num_requests=1000000000000", "need about 931.3 TiB of memory"),
        ("workload.arrival.rate_per_s=.inf", "rate_per_s: expected a finite number, got inf"),
        ("slo.ttft_ms=.nan", "slo.ttft_ms: expected a finite number, got nan"),
    ],
)
def test_validate_refuses_what_run_would(
    override: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(QUICKSTART), "--set", override]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_key_given_twice_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(QUICKSTART.read_text() + "name: again\n")
    assert main(["validate", str(path)]) == 2
    assert "key 'name' appears twice (lines 4 and" in capsys.readouterr().err


def test_show_prints_the_effective_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = cli(capsys, "show", QUICKSTART, *SMALL)
    shown = yaml.safe_load(out)
    effective = load_scenario(QUICKSTART, ["workload.num_requests=200"])
    assert shown == effective.model_dump(mode="json")
    assert "max_batched_tokens" in out
    assert "gpu_memory_utilization" in out  # a default the file does not give
    assert shown["workload"]["num_requests"] == 200
    # What show prints is itself a valid scenario, and the same one.
    again = tmp_path / "shown.yaml"
    again.write_text(out)
    assert cli(capsys, "validate", again).startswith(f"{again}: ok")
    assert load_scenario(again).config_hash() == effective.config_hash()


# ---------------------------------------------------------------------- runs, report, export


def test_runs_lists_the_run(one_run: tuple[Path, str, str], capsys) -> None:
    db, run_id, _ = one_run
    out = cli(capsys, "runs", "--db", db)
    assert run_id in out
    assert "quickstart" in out
    listed = json.loads(cli(capsys, "runs", "--db", db, "--json"))
    assert [r["run_id"] for r in listed] == [run_id]


def test_report_writes_html_and_markdown(
    one_run: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id, _ = one_run
    out_dir = tmp_path / "report"
    out = cli(capsys, "report", "--db", db, "--out", out_dir)
    assert "report.html" in out
    html = (out_dir / "report.html").read_text()
    markdown = (out_dir / "report.md").read_text()
    assert run_id in html or run_id[:8] in html
    assert run_id in markdown or run_id[:8] in markdown


def test_export_requests_to_parquet(
    one_run: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, run_id, _ = one_run
    out = tmp_path / "x.parquet"
    cli(capsys, "export", "requests", "--db", db, "--out", out)
    count = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}')").fetchall()
    assert count == [(200,)]
    runs = duckdb.sql(f"SELECT DISTINCT run_id FROM read_parquet('{out}')").fetchall()
    assert runs == [(run_id,)]
    one = tmp_path / "one.parquet"
    cli(capsys, "export", "requests", "--db", db, "--out", one, "--run", run_id[:6])
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{one}')").fetchall() == [(200,)]


# ---------------------------------------------------------------------- sweeps


def test_sweep_runs_every_point_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = sweep_scenario(tmp_path, [2, 4])
    db = tmp_path / "r.duckdb"
    assert "2 runs" in cli(capsys, "validate", scenario)
    out = cli(capsys, "run", scenario, "--db", db, "--no-progress")
    assert sum(line.startswith("run ") for line in out.splitlines()) == 2
    assert "skipped" not in out
    runs = list_runs(db)
    assert sorted(json.loads(r["sweep_point"])[RATE] for r in runs) == [2, 4]

    again = cli(capsys, "run", scenario, "--db", db, "--no-progress")
    assert again.count("skipped") == 2
    assert len(list_runs(db)) == 2


def test_interrupted_sweep_runs_only_the_missing_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.duckdb"
    first = run_sweep_json(capsys, sweep_scenario(tmp_path, [2], "first.yaml"), db)
    assert len(first) == 1
    rest = cli(
        capsys, "run", sweep_scenario(tmp_path, [2, 4], "full.yaml"), "--db", db, "--no-progress"
    )
    assert rest.count("skipped") == 1
    assert f'skipped {{"{RATE}": 2}}' in rest
    runs = list_runs(db)
    assert len(runs) == 2
    assert sorted(json.loads(r["sweep_point"])[RATE] for r in runs) == [2, 4]


def run_sweep_json(capsys: pytest.CaptureFixture[str], scenario: Path, db: Path) -> list[dict]:
    out = cli(capsys, "run", scenario, "--db", db, "--json")
    return [json.loads(line) for line in out.strip().splitlines()]


def test_a_closed_pipe_ends_quietly() -> None:
    import subprocess
    import sys

    code = "import sys; from workbench.cli import main; sys.exit(main(sys.argv[1:]))"
    child = subprocess.Popen(
        [sys.executable, "-c", code, "show", str(QUICKSTART)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader leaves before anything is written (`| head`)
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 0
    assert err == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["zoo", "build", "apar-tiny"],
        ["zoo", "build", "tiny"],
    ],
)
def test_without_the_real_extra_one_line_names_it(argv: list[str], tmp_path: Path) -> None:
    """A machine installed without torch (the quickstart's install) gets the install line."""
    import subprocess
    import sys

    argv = [*argv, "--cache-dir", str(tmp_path)]
    code = (
        "import sys; sys.modules['torch'] = None; from workbench.cli import main; "
        f"sys.exit(main({argv!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "torch is missing" in lines[0], done.stderr
    assert "pip install -e '.[real]' -c constraints.txt" in lines[0]
    assert list(tmp_path.glob("*.partial")) == []  # a failed build leaves nothing behind
