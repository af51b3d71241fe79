"""Reports answer the question: labels from what differs, the headline against a baseline,
rate sweeps grouped by configuration with their knee, saturated runs marked."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_records import make_meta, synthetic_records

from reports.build import build_report
from reports.collect import RunData, assign_labels, collect_run
from reports.headline import headline_table
from reports.labels import run_labels
from reports.sweeps import rate_sweep_curves
from workbench.errors import WorkbenchError
from workbench.runner import run_scenario
from workbench.scenario.loader import load_scenario
from workbench.store import ResultsStore

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
STATIC = "scheduler={kind: static, batch_size: 32}"


def _config(rate: float, scheduler: str = "continuous", k: int | None = None) -> dict:
    decoder = (
        {"kind": "vanilla"} if k is None else {"kind": "speculative", "num_speculative_tokens": k}
    )
    return {
        "name": "demo",
        "workload": {"num_requests": 200, "arrival": {"kind": "poisson", "rate_per_s": rate}},
        "hardware": {"gpu": "h100-sxm", "replicas": 1, "tensor_parallel": 1},
        "scheduler": {"kind": scheduler},
        "decoder": decoder,
        "slo": {"ttft_ms": 500.0},
    }


# ---------------------------------------------------------------------- labels


def test_labels_name_only_what_differs() -> None:
    configs = [_config(8), _config(8, k=4), _config(16, k=4)]
    assert run_labels(configs, ["demo"] * 3, [None] * 3) == [
        "rate=8 · vanilla",
        "rate=8 · speculative k=4",
        "rate=16 · speculative k=4",
    ]


def test_labels_name_the_scenario_when_several_and_number_identical_runs() -> None:
    configs = [_config(8), _config(8), _config(8), _config(4)]
    labels = run_labels(configs, ["a", "a", "a", "b"], [None, None, "tuned", None])
    assert labels == ["a #1", "a #2", "a · tuned", "b"]


def test_labels_describe_a_differing_section_as_a_whole() -> None:
    wide = _config(8) | {"hardware": {"gpu": "a100-80gb", "replicas": 2, "tensor_parallel": 4}}
    assert run_labels([_config(8), wide], ["demo"] * 2, [None, None]) == [
        "1×h100-sxm",
        "2×a100-80gb TP4",
    ]


# ---------------------------------------------------------------------- rate sweeps


def test_two_schedulers_sweeps_draw_two_separate_curves(tmp_path: Path) -> None:
    """The bug: grouping by scenario name drew one zig-zag line through both schedulers."""
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        for scheduler in ([], [STATIC]):
            for rate in (2, 4, 8):
                scenario = load_scenario(
                    QUICKSTART,
                    [
                        "workload.num_requests=120",
                        f"workload.arrival.rate_per_s={rate}",
                        *scheduler,
                    ],
                )
                run_scenario(scenario, store, source=str(QUICKSTART))
        runs = [collect_run(store, run["run_id"]) for run in store.list_runs()]
    assign_labels(runs)
    curves = rate_sweep_curves(runs)
    assert len(curves) == 2
    assert sorted(curve.label for curve in curves) == ["continuous", "static"]
    for curve in curves:
        assert curve.rates == [2.0, 4.0, 8.0]
        assert len({run.run["scheduler"] for run in curve.runs}) == 1
    from reports.figures import rate_sweep

    served_axes = rate_sweep(curves).axes[0]
    data_lines = [
        line for line in served_axes.get_lines() if line.get_label() in ("continuous", "static")
    ]
    assert len(data_lines) == 2
    assert all(list(line.get_xdata()) == [2.0, 4.0, 8.0] for line in data_lines)


def _run(run_id: str, rate: float, saturated: bool, throughput: float) -> RunData:
    summary = {"saturated": saturated, "request_throughput": throughput}
    return RunData({"run_id": run_id, "scenario_name": "demo"}, _config(rate), summary, {}, {}, 1)


def test_the_knee_is_the_last_rate_before_saturation() -> None:
    runs = [_run("a", 2, False, 2.0), _run("b", 4, False, 3.9), _run("c", 8, True, 5.0)]
    runs.append(_run("d", 16, True, 5.1))
    (curve,) = rate_sweep_curves(runs)
    assert curve.knee is runs[1]
    (never,) = rate_sweep_curves(runs[:2])
    assert never.knee is None  # no saturation within the swept rates


# ---------------------------------------------------------------------- headline


def test_headline_ratios_and_winners(tmp_path: Path) -> None:
    with ResultsStore.open(":memory:") as store:
        for i, rate in enumerate((2.0, 4.0)):
            meta = make_meta(f"run-{i}", config=_config(rate))
            store.write_run(meta, synthetic_records(200, 400, 400, seed=i))
        runs = [collect_run(store, run_id) for run_id in ("run-0", "run-1")]
    assign_labels(runs)
    table = headline_table(runs, runs[0])
    assert table.title == "Against the baseline: rate=2"
    assert table.row_titles == ["run run-0", "run run-1"]
    column = table.headers.index("TTFT p99")
    base, other = runs[0].summary["p99_ttft_ms"], runs[1].summary["p99_ttft_ms"]
    expected = f"{other / base:.2f}×"
    best = min(base, other)
    assert table.rows[1][column] == expected + (" ★" if other == best else "")
    assert table.rows[0][column] == "1.00×" + (" ★" if base == best else "")
    assert table.rows[0][0] == "rate=2 ⚠ (baseline)"  # synthetic runs preempt every request


def test_baseline_option_and_saturated_runs_are_marked(tmp_path: Path) -> None:
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        ids = []
        for rate in (4, 40):  # 40 req/s is far beyond one H100 serving Llama-3-8B
            scenario = load_scenario(
                QUICKSTART, ["workload.num_requests=1200", f"workload.arrival.rate_per_s={rate}"]
            )
            (outcome,) = run_scenario(scenario, store, source=str(QUICKSTART))
            ids.append(outcome.run_id)
            assert outcome.summary["saturated"] is (rate == 40)
        build_report(store, None, tmp_path / "out", baseline=ids[1][:8])
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "## Against the baseline: rate=40 ⚠" not in markdown  # the title names the label
    assert "## Against the baseline: rate=40" in markdown
    assert "| rate=40 ⚠ (baseline) |" in markdown
    warnings = markdown.split("## Warnings")[1].split("\n## ")[0]
    assert "rate=40 is saturated: served" in warnings and "rate=4 " not in warnings


def test_unknown_baseline_is_a_clear_error(tmp_path: Path) -> None:
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("run-0", config=_config(2)), synthetic_records(50, 100, 100))
        with pytest.raises(WorkbenchError, match="no run with id or prefix 'nope'"):
            build_report(store, None, tmp_path, baseline="nope")
