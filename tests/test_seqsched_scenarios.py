"""The shipped sequence-scheduling scenarios run as they are, on the paper's length data, and
show what the paper reports: scheduling by predicted length wastes far fewer token slots."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from reports.build import build_report
from workbench.cli import main
from workbench.metrics.batch import BATCH_METRICS
from workbench.store import ResultsStore

SEQSCHED = Path(__file__).resolve().parent.parent / "scenarios" / "seqsched"
STRATEGIES = ("vanilla", "sort", "vbs", "fcr", "vbs_fcr", "noisy_sort", "noisy_vbs_fcr")
COST_MODELS = ("roofline", "fixed_step")  # the sweep of every seqsched scenario, in order


def run_json(path: Path, db: Path) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(path), "--db", str(db), "--json"]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("seqsched") / "runs.duckdb"


@pytest.fixture(scope="module")
def summaries(database: Path) -> dict[tuple[str, str], dict]:
    """(strategy, cost model) → the run's --json summary."""
    db = database
    out = {}
    for name in STRATEGIES:
        lines = run_json(SEQSCHED / f"{name}.yaml", db)
        assert len(lines) == len(COST_MODELS)
        out.update({(name, cost): line for cost, line in zip(COST_MODELS, lines, strict=True)})
    return out


def test_every_run_completes_and_carries_the_paper_metrics(summaries: dict) -> None:
    for (name, cost), summary in summaries.items():
        assert summary["completed"] == summary["num_requests"] == 1024, (name, cost)
        for key in (*BATCH_METRICS, "request_throughput"):
            assert summary[key] is not None, (name, cost, key)
            assert summary[key] >= 0 if key == "fcr_ratio" else summary[key] > 0, key


def test_scheduling_by_predicted_length_beats_vanilla(summaries: dict) -> None:
    # The paper measured 2.69 / 1.39 = 1.94 samples/s over vanilla with the oracle.
    for cost in COST_MODELS:
        vanilla, best = summaries[("vanilla", cost)], summaries[("vbs_fcr", cost)]
        assert best["effective_token_ratio"] > 1.5 * vanilla["effective_token_ratio"]
        assert best["request_throughput"] > 1.8 * vanilla["request_throughput"]
        assert best["decode_iterations"] < vanilla["decode_iterations"] / 1.9


def test_the_schedule_does_not_depend_on_the_cost_model(summaries: dict) -> None:
    for name in STRATEGIES:
        a, b = (summaries[(name, cost)] for cost in COST_MODELS)
        assert all(a[key] == b[key] for key in BATCH_METRICS), name
    # The memory-bound model prices every step alike: samples/s = 1024 / (steps × 10 ms).
    vanilla = summaries[("vanilla", "fixed_step")]
    expected = 1024 / (vanilla["decode_iterations"] * 0.010)
    assert vanilla["request_throughput"] == pytest.approx(expected)


def test_with_the_oracle_only_the_responses_over_the_limit_fail(summaries: dict) -> None:
    # L_max >= L_t0.0 for every request: an FCR cap cuts off only the 12 responses that are
    # known to exceed the 512 limit, and only FCR batches fail them.
    for name in ("vanilla", "sort", "vbs"):
        summary = summaries[(name, "roofline")]
        assert summary["fcr_ratio"] == 0
        assert summary["effective_token_ratio"] == summary["effective_token_ratio_paper"]
    for name, without_fcr in (("fcr", "sort"), ("vbs_fcr", "vbs")):
        summary, base = summaries[(name, "roofline")], summaries[(without_fcr, "roofline")]
        assert summary["preemptions"] == 12
        assert summary["effective_token_ratio"] < summary["effective_token_ratio_paper"]
        # Their recompute batches run the limit again: ≥ 512 more steps per group of 256.
        assert summary["decode_iterations"] >= base["decode_iterations"] + 4 * 512


def test_truncating_at_the_limit_instead_never_fails_with_the_oracle(tmp_path: Path) -> None:
    """`over_limit: truncate`: the responses over the limit end at 512 in their first batch,
    FCR caps stop at the limit, so the oracle's FCR batches end where VBS alone ends them."""
    out = io.StringIO()
    args = ["run", str(SEQSCHED / "vbs_fcr.yaml"), "--db", str(tmp_path / "t.duckdb"), "--json"]
    with contextlib.redirect_stdout(out):
        assert main([*args, "--set", "scheduler.over_limit=truncate"]) == 0
    truncated = json.loads(out.getvalue().splitlines()[0])
    vbs = run_json(SEQSCHED / "vbs.yaml", tmp_path / "v.duckdb")[0]
    assert truncated["fcr_ratio"] == 0
    assert truncated["decode_iterations"] == vbs["decode_iterations"]
    assert truncated["total_output_tokens"] == vbs["total_output_tokens"]


def test_a_noisy_predictor_fails_some_and_the_paper_count_hides_their_waste(
    summaries: dict,
) -> None:
    noisy = summaries[("noisy_vbs_fcr", "roofline")]
    assert 0.05 < noisy["fcr_ratio"] < 0.3
    assert noisy["effective_token_ratio_paper"] > noisy["effective_token_ratio"]
    assert noisy["preemptions"] == round(noisy["fcr_ratio"] * 1024)
    vanilla = summaries[("vanilla", "roofline")]
    assert noisy["effective_token_ratio"] > vanilla["effective_token_ratio"]


def test_the_report_compares_the_strategies(
    summaries: dict, database: Path, tmp_path: Path
) -> None:
    with ResultsStore.open(database, read_only=True) as store:
        build_report(store, None, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    table = markdown.split("## Sequence scheduling (static batches)")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "Run" not in line]
    assert len(rows) == len(summaries)
    vanilla = summaries[("vanilla", "roofline")]
    assert (
        f"| {vanilla['avg_batch_length']:.1f} | {vanilla['effective_token_ratio']:.3f} |" in table
    )
    assert (tmp_path / "batch_lengths.png").stat().st_size > 0


def test_length_aware_admission_against_fcfs_under_poisson_load(tmp_path: Path) -> None:
    fcfs, spf, spf_aged, buckets_aged, noisy_aged = run_json(
        SEQSCHED / "continuous_admission.yaml", tmp_path / "runs.duckdb"
    )
    # Short requests stop queueing behind long ones: goodput and median latency improve.
    for better in (spf, spf_aged, buckets_aged, noisy_aged):
        assert better["request_goodput"] > 1.2 * fcfs["request_goodput"]
        assert better["median_ttft_ms"] < fcfs["median_ttft_ms"] / 5
        assert better["mean_e2el_ms"] < fcfs["mean_e2el_ms"]
    # Without aging the longest requests starve; aging bounds their wait.
    assert spf["p99_ttft_ms"] > 2 * fcfs["p99_ttft_ms"]
    assert spf_aged["p99_ttft_ms"] < spf["p99_ttft_ms"] / 2
