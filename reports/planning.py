"""The planning section of a report, rebuilt from a plan's stored probes alone.

Every probe of `workbench plan` is a run whose `info` says which plan, configuration and
point it was, its verdict and its summary. From those: per configuration its answer (the
highest passing rate, or the fewest passing replicas and their cost), the cost-latency
Pareto front, throughput-latency curves of the finalists, SLO attainment per SLO at the
answer, and the what-if table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from reports.content import FigureImage, Table
from workbench.metrics import request_metrics
from workbench.store import ResultsStore

RATE = "workload.arrival.rate_per_s"
REPLICAS = "hardware.replicas"
FINALISTS = 5


@dataclass(frozen=True)
class Probe:
    run_id: str
    config: int
    label: str
    point: dict[str, Any]
    passed: bool | None
    values_ms: dict[str, float | None]
    summary: dict[str, Any]
    stopped_early: bool
    cost_per_replica: float | None


@dataclass(frozen=True)
class StoredPlan:
    plan_id: str
    objective: str
    slo: dict[str, Any] | None
    probes: list[Probe]

    def by_config(self) -> dict[int, list[Probe]]:
        groups: dict[int, list[Probe]] = defaultdict(list)
        for probe in self.probes:
            groups[probe.config].append(probe)
        return dict(sorted(groups.items()))


def plan_probe_ids(store: ResultsStore) -> list[str]:
    """Runs that are probes of some plan."""
    rows = store.connection.execute(
        "SELECT run_id FROM runs WHERE json_extract_string(info, '$.plan_id') IS NOT NULL"
    ).fetchall()
    return [run_id for (run_id,) in rows]


def stored_plans(store: ResultsStore) -> list[StoredPlan]:
    rows = store.connection.execute(
        "SELECT run_id, info FROM runs WHERE json_extract_string(info, '$.plan_id') IS NOT NULL "
        "ORDER BY started_at, run_id"
    ).fetchall()
    plans: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for run_id, info in rows:
        data = json.loads(info)
        plans[data["plan_id"]].append((run_id, data))
    return [_plan(plan_id, rows) for plan_id, rows in plans.items()]


def _plan(plan_id: str, rows: list[tuple[str, dict]]) -> StoredPlan:
    first = rows[0][1]
    return StoredPlan(
        plan_id,
        first.get("plan_objective", ""),
        json.loads(first.get("plan_slo_json", "null")),
        [_probe(run_id, info) for run_id, info in rows],
    )


def _probe(run_id: str, info: dict) -> Probe:
    verdict = json.loads(info.get("plan_verdict", "null"))
    return Probe(
        run_id=run_id,
        config=int(info.get("plan_config", 0)),
        label=info.get("plan_label", ""),
        point=json.loads(info.get("plan_point", "{}")),
        passed=None if verdict is None else bool(verdict["passed"]),
        values_ms={} if verdict is None else verdict["values_ms"],
        summary=json.loads(info.get("plan_summary", "{}")),
        stopped_early="stopped_early" in info,
        cost_per_replica=json.loads(info.get("plan_cost_per_replica", "null")),
    )


# ---------------------------------------------------------------------- answers


def answer_probe(probes: list[Probe], objective: str) -> Probe | None:
    """The probe a configuration's answer rests on: its highest passing rate (max rate) or
    its fewest passing replicas (cheapest); seeds other than the plan's are left out."""
    base = [p for p in probes if p.passed and "seed" not in p.point]
    if not base:
        return None
    if objective == "max_rate":
        return max(base, key=lambda p: p.point[RATE])
    return min(base, key=lambda p: p.point[REPLICAS])


def _cost(probe: Probe) -> float | None:
    if probe.cost_per_replica is None:
        return None
    return probe.cost_per_replica * probe.point.get(REPLICAS, 1)


def _limits(plan: StoredPlan) -> dict[str, dict]:
    if not plan.slo:
        return {}
    return {k: v for k, v in plan.slo.items() if isinstance(v, dict) and "max_ms" in v}


# ---------------------------------------------------------------------- tables


def planning_tables(plan: StoredPlan) -> list[Table]:
    if plan.objective == "what_if":
        return [_what_if_table(plan)]
    limits = _limits(plan)
    headers = ["configuration", "status"]
    headers += ["max rate (req/s)"] if plan.objective == "max_rate" else ["replicas", "$/h"]
    headers += [f"p{v['percentile']:g} {k.upper()} (ms)" for k, v in limits.items()]
    rows = []
    for probes in plan.by_config().values():
        answer = answer_probe(probes, plan.objective)
        row = [probes[0].label, "ok" if answer else _failure(probes, plan.objective)]
        if answer is None:
            row += ["-"] * (len(headers) - 2)
        else:
            if plan.objective == "max_rate":
                row.append(f"{answer.point[RATE]:.3g}")
            else:
                row += [str(answer.point[REPLICAS]), f"{_cost(answer) or 0:.2f}"]
            row += [_ms(answer.values_ms.get(k)) for k in limits]
        rows.append(row)
    note = (
        f"Plan {plan.plan_id}: {len(plan.probes)} stored probes "
        f"({sum(p.stopped_early for p in plan.probes)} stopped early once their SLO was lost)."
    )
    return [Table("Plan: every configuration", headers, rows, note=note, text_columns=2)]


def _what_if_table(plan: StoredPlan) -> Table:
    keys = [
        ("request_throughput", "req/s"),
        ("median_ttft_ms", "p50 TTFT"),
        ("p99_ttft_ms", "p99 TTFT"),
        ("median_tpot_ms", "p50 TPOT"),
        ("p99_tpot_ms", "p99 TPOT"),
        ("median_e2el_ms", "p50 E2E"),
    ]
    base = {p.point.get(RATE): p.summary for p in plan.probes if p.label == "baseline"}
    rows = []
    for probe in plan.probes:
        reference = base.get(probe.point.get(RATE), {})
        row = [probe.label, f"{probe.point.get(RATE, 0):g}"]
        for key, _ in keys:
            value, ref = probe.summary.get(key), reference.get(key)
            cell = "-" if value is None else f"{value:.4g}"
            if probe.label != "baseline" and value is not None and ref:
                cell += f" ({value / ref - 1:+.0%})"
            row.append(cell)
        rows.append(row)
    headers = ["variant", "rate (req/s)"] + [label for _, label in keys]
    return Table("What-if: variants beside the baseline", headers, rows, text_columns=1)


def _failure(probes: list[Probe], objective: str) -> str:
    """What a configuration without a passing probe showed (a search the cost bound
    stopped early shows fewer replicas than the limit)."""
    if objective == "max_rate":
        return f"fails down to {min(p.point[RATE] for p in probes):.3g} req/s"
    return f"fails up to {max(p.point[REPLICAS] for p in probes)} replicas"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# ---------------------------------------------------------------------- figures


def planning_figures(store: ResultsStore, plan: StoredPlan) -> list[tuple[str, str, Figure]]:
    """(name, title, figure) of the plan's figures."""
    if plan.objective == "what_if":
        return []
    out = []
    if plan.objective == "max_rate":
        out.append(("plan_max_rate", "Highest rate meeting the SLOs", _max_rate_bars(plan)))
        out.append(("plan_curves", "Latency against rate, finalists", _rate_curves(plan)))
    else:
        out.append(("plan_pareto", "Cost against latency at the answer", _pareto(plan)))
    attainment = _attainment_bars(store, plan)
    if attainment is not None:
        out.append(("plan_attainment", "SLO attainment at the answer", attainment))
    return out


def _max_rate_bars(plan: StoredPlan) -> Figure:
    answers = [
        (probes[0].label, answer_probe(probes, plan.objective))
        for probes in plan.by_config().values()
    ]
    answers = sorted(
        ((label, a.point[RATE]) for label, a in answers if a is not None), key=lambda x: x[1]
    )
    figure = Figure(figsize=(7, 0.35 * len(answers) + 1.5), layout="constrained")
    axes = figure.add_subplot()
    axes.barh([label for label, _ in answers], [rate for _, rate in answers])
    axes.set_xlabel("highest rate meeting the SLOs (requests / s)")
    axes.tick_params(axis="y", labelsize="small")
    axes.grid(axis="x", alpha=0.3)
    return figure


def _finalists(plan: StoredPlan) -> list[list[Probe]]:
    groups = [
        probes for probes in plan.by_config().values() if answer_probe(probes, plan.objective)
    ]
    return sorted(groups, key=lambda g: -answer_probe(g, plan.objective).point[RATE])[:FINALISTS]


def _rate_curves(plan: StoredPlan) -> Figure:
    limits = _limits(plan)
    figure = Figure(figsize=(5 * max(len(limits), 1), 4), layout="constrained")
    axes_list = figure.subplots(1, max(len(limits), 1), squeeze=False)[0]
    for axes, (metric, limit) in zip(axes_list, limits.items(), strict=False):
        for probes in _finalists(plan):
            full = sorted(
                (p for p in probes if not p.stopped_early and "seed" not in p.point),
                key=lambda p: p.point[RATE],
            )
            points = [(p.point[RATE], p.values_ms.get(metric)) for p in full]
            points = [(x, y) for x, y in points if y is not None]
            if points:
                axes.plot(*zip(*points, strict=True), marker="o", label=probes[0].label)
        axes.axhline(limit["max_ms"], color="black", linestyle="--", linewidth=1, label="SLO")
        axes.set_xlabel("arrival rate (requests / s)")
        axes.set_ylabel(f"p{limit['percentile']:g} {metric.upper()} (ms)")
        axes.set_yscale("log")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="x-small")
    return figure


def _pareto(plan: StoredPlan) -> Figure:
    limits = _limits(plan)
    metric = next(iter(limits))
    points = []
    for probes in plan.by_config().values():
        answer = answer_probe(probes, plan.objective)
        cost = None if answer is None else _cost(answer)
        value = None if answer is None else answer.values_ms.get(metric)
        if cost is not None and value is not None:
            points.append((cost, value, probes[0].label))
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    if points:
        costs, values, labels = zip(*points, strict=True)
        axes.scatter(costs, values, alpha=0.6)
        front = _pareto_front(np.array(costs), np.array(values))
        axes.plot(np.array(costs)[front], np.array(values)[front], color="C3", label="Pareto front")
        for i in front:
            axes.annotate(labels[i], (costs[i], values[i]), fontsize="x-small")
    axes.axhline(limits[metric]["max_ms"], color="black", linestyle="--", linewidth=1, label="SLO")
    axes.set_xlabel("cost ($ / hour) at the fewest passing replicas")
    axes.set_ylabel(f"p{limits[metric]['percentile']:g} {metric.upper()} (ms)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def _pareto_front(cost: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Indices of points no other point beats on both cost and latency, by cost."""
    order = np.lexsort((value, cost))
    front, best = [], np.inf
    for i in order:
        if value[i] < best:
            front.append(i)
            best = value[i]
    return np.array(front, dtype=np.int64)


def _attainment_bars(store: ResultsStore, plan: StoredPlan) -> Figure | None:
    """Share of requests meeting each limit at the best configuration's answer."""
    answers = [answer_probe(p, plan.objective) for p in plan.by_config().values()]
    answers = [a for a in answers if a is not None]
    if not answers:
        return None
    if plan.objective == "max_rate":
        best = max(answers, key=lambda a: a.point[RATE])
    else:
        best = min(answers, key=lambda a: (_cost(a) or 0, a.config))
    per_request = request_metrics(store.load_records(best.run_id))
    done = per_request["finished"]
    columns = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
    shares = {}
    for metric, limit in _limits(plan).items():
        if metric in columns:
            value_s = np.nan_to_num(per_request[columns[metric]][done], nan=0.0)
            shares[f"{metric.upper()} ≤ {limit['max_ms']:g} ms"] = float(
                np.mean(value_s * 1e3 <= limit["max_ms"])
            )
    figure = Figure(figsize=(6, 3), layout="constrained")
    axes = figure.add_subplot()
    axes.barh(list(shares), [100 * v for v in shares.values()])
    axes.set_xlim(min(90.0, 100 * min(shares.values(), default=1) - 1), 100)
    axes.set_xlabel(f"requests meeting the limit (%), {best.label}")
    axes.grid(axis="x", alpha=0.3)
    return figure


def planning_images(store: ResultsStore) -> tuple[list[Table], list[FigureImage]]:
    """Every stored plan's tables and figures (PNG), for `build_report`."""
    from reports.figures import png_bytes

    tables: list[Table] = []
    images: list[FigureImage] = []
    for plan in stored_plans(store):
        tables += planning_tables(plan)
        for name, title, figure in planning_figures(store, plan):
            images.append(FigureImage(f"{name}_{plan.plan_id}", title, png_bytes(figure)))
    return tables, images
