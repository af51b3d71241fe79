"""Reports from the database alone: files, embedded figures, table cells = metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from fixtures_records import RequestSpec, make_meta, make_records, synthetic_records

from reports.build import build_report
from reports.collect import downsample
from workbench import metrics
from workbench.cli import main
from workbench.errors import WorkbenchError
from workbench.records import RunRecords
from workbench.scenario.system import SLOConfig
from workbench.store import ResultsStore

SLO = SLOConfig(ttft_ms=500.0)  # what make_meta's config_json carries


def _run_a() -> RunRecords:
    steps = {0: [(0.0, 0.5), (0.5, 0.5), (1.0, 0.25), (2.0, 0.5)]}
    return make_records(
        steps,
        [
            RequestSpec(0, 0.0, [(0, 0, 3, 1)]),
            RequestSpec(1, 0.25, [(0, 1, 2, 2)]),
            RequestSpec(2, 0.5, [(0, 2, 2, 1)]),
        ],
    )


def _run_b() -> RunRecords:
    steps = {0: [(0.0, 0.25), (0.25, 0.25)], 1: [(0.1, 0.5), (0.6, 0.5), (1.1, 0.5)]}
    return make_records(
        steps,
        [
            RequestSpec(7, 0.0, [(0, 0, 1, 1)]),
            RequestSpec(8, 0.1, [(1, 0, 0, 1), (1, 2, 2, 1)], preemptions=1),
            RequestSpec(9, 0.2, [(1, 1, 1, 1)], status="unfinished"),
        ],
    )


@pytest.fixture
def store() -> ResultsStore:
    store = ResultsStore.open(":memory:")
    store.write_run(make_meta("run-alpha-0001"), _run_a())
    store.write_run(make_meta("run-beta-0002", backend="real", decoder="speculative"), _run_b())
    return store


def _section_rows(markdown: str, title: str) -> dict[str, list[str]]:
    """The rows of the table under the heading `## title`, by their first cell."""
    lines = markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0].splitlines()
    lines = [line for line in lines if line.startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    body = cells[2:]  # after the header and the alignment row
    return {row[0]: row[1:] for row in body if len(row) > 1}


def _labels(markdown: str) -> dict[str, str]:
    """run id → label, from the runs table (label first, id second)."""
    return {row[0]: label for label, row in _section_rows(markdown, "Runs").items()}


def test_report_files_and_embedded_figures(store: ResultsStore, tmp_path: Path) -> None:
    html_path = build_report(store, None, tmp_path / "out")
    out = tmp_path / "out"
    assert html_path == out / "report.html"
    html = html_path.read_text()
    for run_id in ("run-alpha-0001", "run-beta-0002"):
        assert run_id in html
    assert re.search(r'<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', html)
    assert "http://" not in html and "https://" not in html  # no external assets
    markdown = (out / "report.md").read_text()
    for name in re.findall(r"\]\(([^)]+\.png)\)", markdown):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"cdf_ttft.png", "cdf_tpot.png", "cdf_e2e.png", "throughput.png"} <= {
        p.name for p in out.glob("*.png")
    }
    assert len(list(out.glob("steps_*.png"))) == 2


def test_markdown_rows_match_the_metrics(store: ResultsStore, tmp_path: Path) -> None:
    build_report(store, ["run-alpha", "run-beta"], tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    labels = _labels(markdown)
    assert labels == {"run-alpha-0001": "tiny #1", "run-beta-0002": "tiny #2"}  # same config
    for run_id, records in (("run-alpha-0001", _run_a()), ("run-beta-0002", _run_b())):
        s = metrics.summarize(records, SLO)
        label = labels[run_id]
        assert _section_rows(markdown, "Runs")[label][-1] == f"{s['completed']}/{s['num_requests']}"
        throughput = _section_rows(markdown, "Throughput")[label]
        assert throughput[:3] == [
            f"{s['request_throughput']:.3f}",
            f"{s['request_goodput']:.3f}",
            f"{s['output_throughput']:.1f}",
        ]
        for metric, title in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E")):
            row = _section_rows(markdown, f"{title} (ms)")[label]
            stats = ("mean", "median", "p90", "p99")
            expected = [f"{s[f'{stat}_{metric}_ms']:.2f}" for stat in stats]
            assert row == [*expected, str(s[f"n_{metric}"])], metric


def test_only_the_requested_runs(store: ResultsStore, tmp_path: Path) -> None:
    html = build_report(store, ["run-beta"], tmp_path).read_text()
    assert "run-beta-0002" in html and "run-alpha-0001" not in html


def test_text_is_escaped(tmp_path: Path) -> None:
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("x<1>", scenario_name="<script>alert(1)</script>"), _run_a())
        html = build_report(store, None, tmp_path).read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "x&lt;1&gt;" in html


def test_rate_sweep_figure(tmp_path: Path) -> None:
    with ResultsStore.open(":memory:") as store:
        for i, rate in enumerate((1.0, 2.0, 4.0)):
            config = {
                "hardware": {"gpu": "h100-sxm", "replicas": 2, "tensor_parallel": 1},
                "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate}},
                "slo": {"ttft_ms": 300.0},
            }
            meta = make_meta(f"sweep-{i}", scenario_name="sweep", config=config)
            meta.config_json = json.dumps(config)
            store.write_run(meta, synthetic_records(200, 400, 400, seed=i))
        build_report(store, None, tmp_path)
    assert (tmp_path / "rate_sweep.png").exists()
    assert "h100-sxm ×2" in (tmp_path / "report.md").read_text()


def test_downsample_keeps_at_most_the_budget() -> None:
    time_s = np.arange(100_000, dtype=float)  # (100000,)
    means = downsample(time_s, time_s, 5000)
    assert len(means) <= 5000 and means[0] == pytest.approx(9.5)  # bin 0 holds t = 0..19


def test_a_file_where_the_folder_goes_is_refused_before_drawing(
    store: ResultsStore, tmp_path: Path
) -> None:
    taken = tmp_path / "report"
    taken.write_text("mine")
    with pytest.raises(WorkbenchError, match="a file, not a folder") as caught:
        build_report(store, None, taken)
    assert caught.value.one_line().startswith(str(taken))
    assert taken.read_text() == "mine"
    with pytest.raises(WorkbenchError, match="cannot make the report folder"):
        build_report(store, None, taken / "inside")


def test_the_cli_reports_a_file_it_cannot_write_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Any OSError a command meets (here the report's) is one line with its file, exit 2."""
    import reports.build

    def denied(*args: object, **kwargs: object) -> Path:
        raise PermissionError(13, "Permission denied", "/somewhere/report.html")

    monkeypatch.setattr(reports.build, "build_report", denied)
    db = tmp_path / "r.duckdb"
    with ResultsStore.open(db):
        pass
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == "error: /somewhere/report.html: Permission denied\n"
