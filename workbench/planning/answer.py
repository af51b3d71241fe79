"""A finished plan as an answer: the recommendation and why, on one screen, and as JSON.

The answer states its precision: the bisection's bracket (max rate) or the exact replica
count (cheapest), the requests per probe, how many requests lie beyond the deciding
percentile (a warning under `FEW_TAIL_REQUESTS`), and the deciding percentile re-measured
with other seeds (`plan.spread_seeds`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.planning.planner import Configuration, PlanRun
from workbench.planning.probe import RATE_PATH, REPLICAS_PATH, ProbeOutcome
from workbench.planning.search import RateAnswer, ReplicaAnswer
from workbench.planning.slo import FEW_TAIL_REQUESTS, tail_requests
from workbench.scenario.plan import PlanConfig, PlanSLO

CLOSEST_SHOWN = 3


def best_configuration(run: PlanRun, plan: PlanConfig) -> Configuration | None:
    """Max rate: the highest rate found; cheapest: the lowest cost (ties: lower index)."""
    if plan.objective.kind == "max_rate":
        rated = [c for c in run.configurations if _rate(c) is not None]
        return max(rated, key=lambda c: (_rate(c), -c.index), default=None)
    costed = [c for c in run.configurations if _replicas(c) is not None]
    return min(costed, key=lambda c: (_cost(c), c.index), default=None)


def deciding_outcome(config: Configuration) -> ProbeOutcome | None:
    """The passing probe the configuration's answer rests on."""
    answer = config.answer
    if isinstance(answer, RateAnswer) and answer.passing is not None:
        key, value = RATE_PATH, answer.passing
    elif isinstance(answer, ReplicaAnswer) and answer.replicas is not None:
        key, value = REPLICAS_PATH, answer.replicas
    else:
        return None
    for outcome in config.outcomes:
        if outcome.spec.values.get(key) == value and outcome.verdict is not None:
            return outcome
    return None


def _rate(config: Configuration) -> float | None:
    answer = config.answer
    return answer.passing if isinstance(answer, RateAnswer) else None


def _replicas(config: Configuration) -> int | None:
    answer = config.answer
    return answer.replicas if isinstance(answer, ReplicaAnswer) else None


def _cost(config: Configuration) -> float:
    return (_replicas(config) or 0) * config.replica_cost


def deciding_metric(outcome: ProbeOutcome, slo: PlanSLO) -> tuple[str, float]:
    """The limited metric closest to (or furthest over) its limit, and that ratio."""
    assert outcome.verdict is not None
    values = outcome.verdict.values_ms
    ratios = {name: (values[name] or np.inf) / limit.max_ms for name, limit in slo.limits().items()}
    name = max(ratios, key=lambda n: ratios[n])
    return name, float(ratios[name])


# ---------------------------------------------------------------------- JSON


def answer_json(run: PlanRun, plan: PlanConfig, requests: int) -> dict[str, Any]:
    best = best_configuration(run, plan) if plan.objective.kind != "what_if" else None
    return {
        "plan_id": run.plan_id,
        "objective": plan.objective.model_dump(mode="json"),
        "slo": None if plan.slo is None else plan.slo.model_dump(mode="json"),
        "feasible": best is not None,
        "answer": None if best is None else _config_json(best, plan),
        "configurations": [_config_json(c, plan) for c in run.configurations],
        "precision": _precision(run, plan, best, requests),
        "simulations": {
            "run": run.probes_run,
            "stopped_early": run.probes_stopped_early,
            "reused": run.probes_reused,
        },
        "wall_s": run.wall_s,
    }


def _config_json(config: Configuration, plan: PlanConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"index": config.index, "label": config.label, "values": config.values}
    if config.refusal is not None:
        out["status"] = "infeasible"
        out["reason"] = config.refusal
        return out
    answer = config.answer
    if isinstance(answer, RateAnswer):
        out["max_rate_per_s"] = answer.passing
        out["failing_rate_per_s"] = answer.failing
        out["status"] = "ok" if answer.passing is not None else "no passing rate"
    elif isinstance(answer, ReplicaAnswer):
        out["replicas"] = answer.replicas
        out["cost_per_replica_usd_h"] = config.cost_per_replica_usd_h
        out["cost_usd_h"] = None if answer.replicas is None else _cost(config)
        out["status"] = "ok" if answer.replicas else ("pruned" if answer.pruned else "no fit")
    deciding = deciding_outcome(config)
    if deciding is not None and deciding.verdict is not None:
        out["at_answer_ms"] = deciding.verdict.values_ms
    margins = [o.verdict.margin(plan.slo) for o in config.outcomes if o.verdict and plan.slo]
    out["best_margin"] = min(margins) if margins else None
    out["probes"] = len(config.outcomes)
    return out


def _precision(
    run: PlanRun, plan: PlanConfig, best: Configuration | None, requests: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"requests_per_probe": requests}
    if plan.objective.kind == "max_rate":
        out["rate_tolerance"] = plan.objective.precision  # type: ignore[union-attr]
    if best is None or plan.slo is None:
        return out
    deciding = deciding_outcome(best)
    if deciding is None or deciding.verdict is None:
        return out
    name, _ = deciding_metric(deciding, plan.slo)
    percentile = plan.slo.limits()[name].percentile
    out["deciding_metric"] = name
    out["deciding_percentile"] = percentile
    out["tail_requests"] = tail_requests(deciding.verdict.completed, percentile)
    spread = [o.verdict.values_ms[name] for o in run.spread if o.verdict is not None]
    if spread:
        out["spread_seeds_ms"] = spread
        out["spread_passed"] = sum(bool(o.verdict and o.verdict.passed) for o in run.spread)
    return out


# ---------------------------------------------------------------------- text


def answer_text(run: PlanRun, plan: PlanConfig, requests: int) -> str:
    if plan.objective.kind == "what_if":
        raise ValueError("what-if plans print a table (what_if_text)")
    lines = [_headline(plan, requests)]
    best = best_configuration(run, plan)
    lines += _recommendation(best, plan) if best is not None else _infeasible(run, plan)
    lines += _precision_lines(run, plan, best, requests)
    lines += _ranking(run, plan)
    lines.append(
        f"  searched {len(run.configurations)} configurations: {run.probes_run} simulations "
        f"({run.probes_stopped_early} stopped early), {run.probes_reused} reused from the "
        f"database, {run.wall_s:.0f} s"
    )
    return "\n".join(lines)


def _slo_text(slo: PlanSLO) -> str:
    parts = [f"p{v.percentile:g} {k.upper()} ≤ {v.max_ms:g} ms" for k, v in slo.limits().items()]
    if slo.attainment is not None:
        parts.append(f"{slo.attainment:.0%} of requests within every limit")
    return ", ".join(parts)


def _headline(plan: PlanConfig, requests: int) -> str:
    assert plan.slo is not None
    objective = plan.objective
    if objective.kind == "max_rate":
        return f"highest rate meeting {_slo_text(plan.slo)} ({requests} requests per probe):"
    return (
        f"cheapest deployment for {objective.rate_per_s:g} req/s meeting "  # type: ignore[union-attr]
        f"{_slo_text(plan.slo)} ({requests} requests per probe):"
    )


def _recommendation(best: Configuration, plan: PlanConfig) -> list[str]:
    assert plan.slo is not None
    deciding = deciding_outcome(best)
    if isinstance(best.answer, RateAnswer):
        head = f"  answer: {best.label}: {best.answer.passing:.3g} req/s"
    else:
        head = f"  answer: {_replicas(best)} × ({best.label}), ${_cost(best):.2f}/h"
    lines = [head]
    if deciding is not None and deciding.verdict is not None:
        name, ratio = deciding_metric(deciding, plan.slo)
        values = ", ".join(
            f"p{plan.slo.limits()[k].percentile:g} {k.upper()} {v:.1f} ms"
            for k, v in deciding.verdict.values_ms.items()
            if v is not None
        )
        lines.append(f"    there: {values}; deciding: {name.upper()} at {ratio:.0%} of its limit")
    return lines


RANKED_SHOWN = 8


def _ranking(run: PlanRun, plan: PlanConfig) -> list[str]:
    """The best configurations after the answer, one line each."""
    if plan.objective.kind == "max_rate":
        rated = [c for c in run.configurations if _rate(c) is not None]
        ranked = sorted(rated, key=lambda c: (-(_rate(c) or 0), c.index))
        rows = [f"    {_rate(c):>9.3g} req/s  {c.label}" for c in ranked[:RANKED_SHOWN]]
    else:
        costed = [c for c in run.configurations if _replicas(c) is not None]
        ranked = sorted(costed, key=lambda c: (_cost(c), c.index))
        rows = [
            f"    ${_cost(c):>8.2f}/h  {_replicas(c):>3} × {c.label}" for c in ranked[:RANKED_SHOWN]
        ]
    refused = [c for c in run.configurations if c.refusal is not None][:RANKED_SHOWN]
    cannot = [f"    cannot run: {c.label}: {c.refusal}" for c in refused]
    others = len(run.configurations) - len(rows) - len(cannot)
    tail = [f"    ... and {others} more (--json lists every configuration)"] if others > 0 else []
    return ["  ranking:", *rows, *cannot, *tail] if rows else []


def _infeasible(run: PlanRun, plan: PlanConfig) -> list[str]:
    lines = ["  infeasible: no configuration meets the SLOs; the closest:"]
    tried = [c for c in run.configurations if c.refusal is None and c.outcomes]
    closest = sorted(tried, key=lambda c: (_best_margin(c, plan), c.index))[:CLOSEST_SHOWN]
    for config in closest:
        margin = _best_margin(config, plan)
        lines.append(f"    {config.label}: worst metric at {margin:.0%} of its limit at best")
    refused = [c for c in run.configurations if c.refusal is not None]
    if refused:
        lines.append(f"    ({len(refused)} configurations cannot run: {refused[0].refusal})")
    return lines


def _best_margin(config: Configuration, plan: PlanConfig) -> float:
    assert plan.slo is not None
    margins = [o.verdict.margin(plan.slo) for o in config.outcomes if o.verdict is not None]
    return min(margins) if margins else float("inf")


def _precision_lines(
    run: PlanRun, plan: PlanConfig, best: Configuration | None, requests: int
) -> list[str]:
    info = _precision(run, plan, best, requests)
    lines = []
    if isinstance(best and best.answer, RateAnswer):
        answer = best.answer  # type: ignore[union-attr]
        failing = (
            "no failing rate found"
            if answer.failing is None
            else f"fails at {answer.failing:.3g} req/s"
        )
        lines.append(
            f"  precision: bisection to {info['rate_tolerance']:.0%} (passes at "
            f"{answer.passing:.4g} req/s, {failing})"
        )
    if "deciding_metric" in info:
        name, tail = info["deciding_metric"].upper(), info["tail_requests"]
        note = f"  p{info['deciding_percentile']:g} {name} rests on {tail:.0f} requests beyond it"
        if tail < FEW_TAIL_REQUESTS:
            note += f" — WARNING: fewer than {FEW_TAIL_REQUESTS}; raise requests_per_probe"
        lines.append(note)
    if "spread_seeds_ms" in info:
        spread = info["spread_seeds_ms"]
        lines.append(
            f"  other seeds: {name} {min(spread):.1f}–{max(spread):.1f} ms over "
            f"{len(spread)} seeds ({info['spread_passed']} of {len(spread)} pass)"
        )
    return lines


def what_if_rows(run: PlanRun, summaries: list[dict]) -> list[dict[str, Any]]:
    """One row per (variant, rate): its summary and the change from the baseline there."""
    base = {
        c.values[RATE_PATH]: s
        for c, s in zip(run.configurations, summaries, strict=True)
        if c.label == "baseline"
    }
    rows = []
    for config, summary in zip(run.configurations, summaries, strict=True):
        rate = config.values[RATE_PATH]
        row = {"variant": config.label, "rate_per_s": rate, "refusal": config.refusal, **summary}
        reference = base.get(rate, {})
        for key, value in summary.items():
            ref = reference.get(key)
            if isinstance(value, int | float) and isinstance(ref, int | float) and ref:
                row[f"change_{key}"] = value / ref - 1
        rows.append(row)
    return rows


WHAT_IF_COLUMNS = (
    ("request_throughput", "req/s"),
    ("median_ttft_ms", "p50 TTFT ms"),
    ("p99_ttft_ms", "p99 TTFT ms"),
    ("median_tpot_ms", "p50 TPOT ms"),
    ("p99_tpot_ms", "p99 TPOT ms"),
    ("median_e2el_ms", "p50 E2E ms"),
)


def what_if_text(rows: list[dict[str, Any]]) -> str:
    header = ["variant", "rate"] + [label for _, label in WHAT_IF_COLUMNS]
    lines = ["  ".join(f"{h:>14}" for h in header)]
    for row in rows:
        cells = [f"{row['variant']:>14}", f"{row['rate_per_s']:>14g}"]
        for key, _ in WHAT_IF_COLUMNS:
            value, change = row.get(key), row.get(f"change_{key}")
            text = "-" if value is None else f"{value:.4g}"
            if change is not None and row["variant"] != "baseline":
                text += f" ({change:+.0%})"
            cells.append(f"{text:>14}")
        lines.append("  ".join(cells))
        if row.get("refusal"):
            lines.append(f"{'':>14}  cannot run: {row['refusal']}")
    return "\n".join(lines)
