"""`workbench plan` end to end: a planted threshold, brute force, resume, bad sections,
infeasible SLOs, and the same answer on every executor (issue 14)."""

from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path

import pytest
import yaml

from simulator.catalogs.hardware import get_gpu
from simulator.run import simulate
from workbench.cli import main
from workbench.errors import WorkbenchError
from workbench.planning.answer import answer_json, best_configuration
from workbench.planning.executor import InlineExecutor, PoolExecutor, check_reachable
from workbench.planning.planner import Planner, PlanRun
from workbench.planning.probe import probe_scenario
from workbench.planning.slo import evaluate
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore

TRACE = Path(__file__).resolve().parent.parent / "data" / "traces" / "splitwise_conv.csv"

# One request at a time, ten 10 ms steps each (a prefill and nine decodes): the replica
# serves 10 req/s, so constant arrivals queue up exactly above 10 req/s.
PLANTED = {
    "name": "planted",
    "workload": {
        "num_requests": 200,
        "arrival": {"kind": "constant", "rate_per_s": 4},
        "prompt_tokens": {"kind": "fixed", "value": 10},
        "output_tokens": {"kind": "fixed", "value": 10},
    },
    "model": {"name": "llama-3-8b"},
    "hardware": {"gpu": "h100-sxm"},
    "cost_model": {"kind": "fixed_step", "step_ms": 10},
    "scheduler": {"kind": "continuous", "max_batch_size": 1},
    "plan": {
        "objective": {"kind": "max_rate", "precision": 0.01},
        "slo": {"ttft": {"percentile": 99, "max_ms": 50}},
        "spread_seeds": 0,
    },
}

SMALL = {
    "name": "small-plan",
    "workload": {
        "num_requests": 300,
        "arrival": {"kind": "poisson", "rate_per_s": 30},
        "lengths_from_trace": {"path": str(TRACE), "order": "shuffle", "max_prompt_tokens": 4096},
    },
    "model": {"name": "llama-3-8b", "dtype": "bf16"},
    "hardware": {"gpu": "h100-sxm"},
    "scheduler": {"kind": "continuous", "chunked_prefill": True, "chunk_size": 2048},
    "routing": {"kind": "least_outstanding"},
    "plan": {
        "objective": {"kind": "cheapest", "rate_per_s": 30, "max_replicas": 8},
        "slo": {
            "ttft": {"percentile": 90, "max_ms": 800},
            "tpot": {"percentile": 90, "max_ms": 30},
        },
        "space": {"hardware.gpu": ["h100-sxm", "a100-80gb"], "hardware.tensor_parallel": [1, 2]},
        "spread_seeds": 0,
    },
}


def _write(tmp_path: Path, data: dict, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _plan(path: Path, db: Path, executor=None, **options) -> tuple[PlanRun, Planner]:
    scenario = load_scenario(path)
    with ResultsStore.open(db) as store:
        planner = Planner(scenario, str(path), store, executor or InlineExecutor(), **options)
        return planner.run(), planner


def test_bisection_finds_the_planted_capacity(tmp_path: Path) -> None:
    run, _ = _plan(_write(tmp_path, PLANTED), tmp_path / "p.duckdb")
    answer = run.configurations[0].answer
    assert 9.9 < answer.passing <= 10.03 < answer.failing  # 10 req/s, 200 requests: 10.02
    assert answer.failing / answer.passing <= 1.01


def _brute_force_cheapest(path: Path) -> tuple[int, int]:
    """Every configuration at every replica count: (configuration index, replicas)."""
    scenario = load_scenario(path)
    plan = scenario.plan
    best = None
    space = plan.space
    for index, combo in enumerate(itertools.product(*space.values())):
        values = dict(zip(space, combo, strict=True))
        for replicas in range(1, plan.objective.max_replicas + 1):
            point = {**values, "hardware.replicas": replicas}
            point["workload.arrival.rate_per_s"] = plan.objective.rate_per_s
            probe = probe_scenario(scenario, point, str(path))
            if evaluate(simulate(probe), plan.slo).passed:
                break
        else:
            continue
        price = get_gpu(values["hardware.gpu"]).hourly_price_usd
        cost = replicas * values["hardware.tensor_parallel"] * price
        if best is None or (cost, index) < best[0]:
            best = ((cost, index), replicas)
    assert best is not None
    return best[0][1], best[1]


@pytest.mark.slow
def test_the_cheapest_answer_equals_brute_force(tmp_path: Path) -> None:
    path = _write(tmp_path, SMALL)
    index, replicas = _brute_force_cheapest(path)
    for early_stop in (True, False):
        run, _ = _plan(path, tmp_path / f"{early_stop}.duckdb", early_stop=early_stop)
        best = best_configuration(run, load_scenario(path).plan)
        assert best is not None
        assert (best.index, best.answer.replicas) == (index, replicas)


def test_an_interrupted_plan_resumes_without_rerunning(tmp_path: Path) -> None:
    path, db = _write(tmp_path, PLANTED), tmp_path / "p.duckdb"
    seen = []

    def kill_after_three(line: str) -> None:
        seen.append(line)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _plan(path, db, progress=kill_after_three)
    resumed, _ = _plan(path, db)
    assert resumed.probes_reused == 3
    fresh, _ = _plan(path, tmp_path / "fresh.duckdb")
    assert resumed.configurations[0].answer == fresh.configurations[0].answer
    again, _ = _plan(path, db)
    assert again.probes_run == 0  # a finished plan re-reports from the database


def test_the_same_answer_on_a_process_pool(tmp_path: Path) -> None:
    path = _write(tmp_path, PLANTED)
    inline, _ = _plan(path, tmp_path / "a.duckdb")
    pool = PoolExecutor(2)
    try:
        pooled, _ = _plan(path, tmp_path / "b.duckdb", executor=pool)
    finally:
        pool.close()
    assert pooled.configurations[0].answer == inline.configurations[0].answer


def test_the_same_answer_on_ray(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from workbench.planning.executor import RayExecutor

    path = _write(tmp_path, PLANTED)
    inline, _ = _plan(path, tmp_path / "a.duckdb")
    executor = RayExecutor(None)
    try:
        ray_run, _ = _plan(path, tmp_path / "b.duckdb", executor=executor)
    finally:
        executor.close()
    assert ray_run.configurations[0].answer == inline.configurations[0].answer
    import ray

    assert not ray.is_initialized()  # the local cluster it started is gone
    ray.init(include_dashboard=False, log_to_driver=False)  # a session of the caller's own
    try:
        RayExecutor(None).close()
        assert ray.is_initialized()  # left as it was found
    finally:
        ray.shutdown()


def test_an_unmeetable_slo_is_an_infeasible_answer_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(SMALL))
    data["plan"]["slo"] = {"ttft": {"percentile": 99, "max_ms": 1}}  # under one step
    data["plan"]["objective"]["max_replicas"] = 2
    path = _write(tmp_path, data)
    assert (
        main(["plan", str(path), "--db", str(tmp_path / "p.duckdb"), "--executor", "inline"]) == 0
    )
    out = capsys.readouterr().out
    assert "infeasible: no configuration meets the SLOs; the closest:" in out
    run, _ = _plan(path, tmp_path / "p.duckdb")
    assert answer_json(run, load_scenario(path).plan, 300)["feasible"] is False


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"space": {"hardware.gpuu": ["h100-sxm"]}}, "hardware.gpuu: unknown key"),
        ({"space": {"hardware.gpu": []}}, "space.hardware.gpu: expected a non-empty list"),
        ({"slo": None}, "objective cheapest needs slo"),
        ({"space": {"hardware.replicas": [1, 2]}}, "searches hardware.replicas itself"),
        ({"space": {"hardware.gpu": ["h100"]}}, "unknown GPU 'h100'"),
    ],
)
def test_bad_plan_sections_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, message: str
) -> None:
    data = json.loads(json.dumps(SMALL))
    data["plan"].update(change)
    path = _write(tmp_path, data)
    assert (
        main(["plan", str(path), "--db", str(tmp_path / "p.duckdb"), "--executor", "inline"]) == 2
    )
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_every_probe_is_a_stored_run_of_the_plan(tmp_path: Path) -> None:
    run, _ = _plan(_write(tmp_path, PLANTED), tmp_path / "p.duckdb")
    with ResultsStore.open(tmp_path / "p.duckdb", read_only=True) as store:
        plans = store.connection.execute(
            "SELECT DISTINCT json_extract_string(info, '$.plan_id') FROM runs"
        ).fetchall()
        stopped = store.connection.execute(
            "SELECT count(*) FROM runs WHERE json_extract_string(info, '$.stopped_early') "
            "IS NOT NULL"
        ).fetchone()
    assert plans == [(run.plan_id,)]
    assert stopped[0] == run.probes_stopped_early > 0


def test_what_if_puts_each_variant_beside_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(PLANTED))
    data["plan"] = {
        "objective": {
            "kind": "what_if",
            "rates_per_s": [4, 8],
            "variants": {"slow steps": {"cost_model": {"kind": "fixed_step", "step_ms": 20}}},
        }
    }
    path = _write(tmp_path, data)
    code = main(
        ["plan", str(path), "--db", str(tmp_path / "w.duckdb"), "--json", "--executor", "inline"]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["variant"], r["rate_per_s"]) for r in rows] == [
        ("baseline", 4), ("baseline", 8), ("slow steps", 4), ("slow steps", 8)
    ]  # fmt: skip
    slow = rows[2]
    assert slow["median_ttft_ms"] == pytest.approx(20.0)  # one step: its prefill
    assert slow["change_median_ttft_ms"] == pytest.approx(1.0)  # twice the baseline's 10 ms


def test_the_report_rebuilds_the_plan_from_its_probes(tmp_path: Path) -> None:
    from reports.build import build_report

    path, db = _write(tmp_path, SMALL), tmp_path / "p.duckdb"
    run, _ = _plan(path, db)
    best = best_configuration(run, load_scenario(path).plan)
    with ResultsStore.open(db, read_only=True) as store:
        html = build_report(store, None, tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Plan: every configuration" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith(f"| {best.label} |"))
    assert f"| ok | {best.answer.replicas} |" in row
    assert (tmp_path / "report" / f"plan_pareto_{run.plan_id}.png").exists()
    assert "Engine steps over time" not in html.read_text()  # probes are not listed one by one


@pytest.mark.parametrize(
    "plan",
    [
        {"objective": {"kind": "max_rate"}, "space": {"hardware.gpu": ["h100-sxm", "b9000"]}},
        {
            "objective": {
                "kind": "what_if",
                "rates_per_s": [4],
                "variants": {"ok": {}, "typo": {"hardware": {"gpu": "b9000"}}},
            }
        },
    ],
)
def test_an_unknown_gpu_is_an_error_before_any_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: dict
) -> None:
    data = json.loads(json.dumps(PLANTED))
    data["plan"].update(plan)
    path, db = _write(tmp_path, data), tmp_path / "p.duckdb"
    assert main(["plan", str(path), "--db", str(db), "--executor", "inline"]) == 2
    err = capsys.readouterr().err
    assert "hardware.gpu: unknown GPU 'b9000'" in err and len(err.strip().splitlines()) == 1
    assert not db.exists()  # nothing ran: the database the command made is removed


def test_configurations_that_cannot_run_are_listed_with_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(PLANTED))
    data["plan"]["space"] = {"hardware.tensor_parallel": [1, 3]}
    path = _write(tmp_path, data)
    assert (
        main(["plan", str(path), "--db", str(tmp_path / "p.duckdb"), "--executor", "inline"]) == 0
    )
    out = capsys.readouterr().out
    assert "cannot run: tp=3: hardware.tensor_parallel: tensor_parallel 3 does not split" in out
    assert "more (--json" not in out  # both configurations are on the page


def test_a_ray_address_nobody_answers_is_refused_at_once() -> None:
    with socket.socket() as listening:  # something answers here
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")
        check_reachable(f"ray://127.0.0.1:{listening.getsockname()[1]}/?namespace=x")
    check_reachable("auto")  # Ray's own to find
    check_reachable("anyscale://cluster")  # another client's scheme: Ray's to resolve
    port = _closed_port()
    with pytest.raises(WorkbenchError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}")
    for bad in ("nonsense", "127.0.0.1:70000"):
        with pytest.raises(WorkbenchError, match="expected HOST:PORT"):
            check_reachable(bad)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again on leaving: nothing listens there
