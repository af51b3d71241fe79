"""Does a run meet a plan's SLOs? The deciding percentiles, attainment and overload guard.

Percentiles are taken over completed requests with linear interpolation (DuckDB's
`quantile_cont`, as the metrics module does); ITL over every gap of every request. A run a
monitor stopped early has failed: the monitor only stops runs whose failure is certain.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from workbench.metrics import itl_sample, request_metrics, weighted_quantile_cont
from workbench.records import RunRecords
from workbench.scenario.plan import PlanSLO

# The overload guard: more than this share of requests waiting past `overload_ttft_s`.
OVERLOAD_SHARE = 0.01
# Fewer requests than this beyond a deciding percentile make it a shaky basis.
FEW_TAIL_REQUESTS = 10


def exceeds(value_s: float | np.ndarray, limit_s: float) -> bool | np.ndarray:
    """One comparison for the verdict and the monitor, so they never disagree by rounding."""
    return value_s > limit_s


@dataclass(frozen=True)
class Verdict:
    passed: bool
    values_ms: dict[str, float | None]  # each limited metric at its percentile
    attainment: float | None  # share of requests meeting every limit (when asked)
    completed: int
    failures: list[str] = field(default_factory=list)  # why it failed, one line each
    stopped_early: str | None = None

    def margin(self, slo: PlanSLO) -> float:
        """The worst metric's value over its limit (< 1 passes that metric); inf unknown."""
        ratios = [
            (self.values_ms[name] or np.inf) / limit.max_ms for name, limit in slo.limits().items()
        ]
        return float(max(ratios)) if ratios else np.inf

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> Verdict:
        return Verdict(**data)


def evaluate(records: RunRecords, slo: PlanSLO) -> Verdict:
    """The plan's verdict on one run."""
    stopped = records.info.get("stopped_early")
    per_request = request_metrics(records)
    done = per_request["finished"]
    values_s = _percentiles(records, per_request, slo)
    failures = [
        f"p{limit.percentile:g} {name.upper()} {1e3 * values_s[name]:.1f} ms > {limit.max_ms:g} ms"
        for name, limit in slo.limits().items()
        if values_s[name] is not None and exceeds(values_s[name], limit.max_ms / 1e3)
    ]
    values = {k: None if v is None else 1e3 * v for k, v in values_s.items()}
    attainment = _attainment(per_request, slo) if slo.attainment is not None else None
    if attainment is not None and attainment < slo.attainment:  # type: ignore[operator]
        failures.append(f"attainment {attainment:.1%} < {slo.attainment:.1%}")
    if (overload := _overloaded(per_request, slo)) is not None:
        failures.append(overload)
    if stopped is not None:
        failures.append(f"stopped early: {stopped}")
    return Verdict(not failures, values, attainment, int(done.sum()), failures, stopped)


def _percentiles(records: RunRecords, per_request: dict, slo: PlanSLO) -> dict[str, float | None]:
    """Each limited metric at its percentile, in seconds."""
    done = per_request["finished"]
    columns = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
    out: dict[str, float | None] = {}
    for name, limit in slo.limits().items():
        q = limit.percentile / 100
        if name == "itl":
            gaps, counts = itl_sample(records, done)
            out[name] = None if counts.sum() == 0 else weighted_quantile_cont(gaps, counts, q)
            continue
        sample = per_request[columns[name]][done]
        sample = sample[np.isfinite(sample)]
        out[name] = float(np.quantile(sample, q)) if len(sample) else None
    return out


def _attainment(per_request: dict, slo: PlanSLO) -> float:
    """Share of all requests that completed within every limit (ITL: its mean gap)."""
    ok = per_request["finished"].copy()
    gaps = np.maximum(per_request["emissions"] - 1, 1)
    mean_itl_s = (per_request["e2e_s"] - per_request["ttft_s"]) / gaps
    columns = {"ttft": per_request["ttft_s"], "tpot": per_request["tpot_s"]}
    columns |= {"e2e": per_request["e2e_s"], "itl": mean_itl_s}
    for name, limit in slo.limits().items():
        value_s = np.nan_to_num(columns[name], nan=0.0)  # undefined (one token): not a miss
        ok &= ~exceeds(value_s, limit.max_ms / 1e3)
    return float(ok.mean()) if len(ok) else 0.0


def _overloaded(per_request: dict, slo: PlanSLO) -> str | None:
    waited = per_request["ttft_s"]
    late = np.count_nonzero(~per_request["finished"] | exceeds(waited, slo.overload_ttft_s))
    if late > OVERLOAD_SHARE * len(waited):
        return f"overloaded: {late} requests waited over {slo.overload_ttft_s:g} s or never ended"
    return None


def tail_requests(completed: int, percentile: float) -> float:
    """How many requests lie beyond the percentile: what a deciding percentile rests on."""
    return completed * (1 - percentile / 100)
