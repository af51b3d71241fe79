"""One probe of a plan: a configuration at a rate (and replica count), simulated, judged.

A probe is an ordinary scenario (the plan's base with the configuration's values, the
rate, the replicas and the probe's request count applied, `plan` and `sweep` removed), so
it is stored as an ordinary run; its identity is the scenario hash plus the SLO it was
judged by. `run_probe` runs in a worker process (or a Ray task) and returns everything the
parent stores; it never touches the database.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.planning.monitor import SloMonitor
from workbench.planning.slo import Verdict, evaluate
from workbench.records import RunRecords
from workbench.scenario.loader import set_dotted, validate_scenario
from workbench.scenario.plan import PlanSLO
from workbench.scenario.scenario import Scenario

RATE_PATH = "workload.arrival.rate_per_s"
REPLICAS_PATH = "hardware.replicas"


@dataclass(frozen=True)
class ProbeSpec:
    """What to simulate: a configuration's values at one point of its search."""

    config: int  # index of the configuration in the plan's space
    values: dict[str, Any]  # dotted path → value: the configuration's and the point's


@dataclass(frozen=True)
class ProbeOutcome:
    spec: ProbeSpec
    scenario_hash: str
    verdict: Verdict | None  # None: the configuration cannot run (see `error`)
    error: str | None = None  # a refusal (weights do not fit, TP does not split heads...)
    run_id: str | None = None  # the stored run (None until stored, or when reused)
    wall_s: float = 0.0
    reused: bool = False


def probe_scenario(base: Scenario, values: dict[str, Any], source: str) -> Scenario:
    """The base scenario with `values` applied, without plan or sweep, validated."""
    data = base.model_dump(mode="json")
    data["plan"] = None
    data["sweep"] = None
    for dotted, value in values.items():
        set_dotted(data, dotted, value, source=source)
    where = f"{source} (plan point {values})"
    scenario = validate_scenario(data, source=where, base_dir=Path("/"))
    _check_gpu_name(scenario, where)
    return scenario


def _check_gpu_name(scenario: Scenario, where: str) -> None:
    """A GPU the catalog does not know is a typo to fix, not a configuration that cannot run
    (those are refused by the probe and listed): an error before any probe."""
    from simulator.catalogs.hardware import get_gpu

    try:
        get_gpu(scenario.hardware.gpu)
    except WorkbenchError as error:
        raise error.with_source(where) from None


def slo_key(slo: PlanSLO) -> str:
    """Identifies the SLO a probe was judged by (a stored verdict is reused only under it)."""
    text = json.dumps(slo.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_probe(
    scenario_json: str, slo_json: str | None, early_stop: bool
) -> tuple[RunRecords | None, Verdict | None, str | None, float]:
    """Simulate one probe: (records, verdict, refusal, wall seconds). Picklable arguments
    (JSON) so any worker can run it; the simulator is imported here, in the worker."""
    from simulator.run import simulate

    scenario = Scenario.model_validate_json(scenario_json)
    slo = None if slo_json is None else PlanSLO.model_validate_json(slo_json)
    started = time.perf_counter()
    monitor = SloMonitor(slo, scenario.workload.num_requests) if slo and early_stop else None
    try:
        records = simulate(scenario, monitor=monitor)
    except WorkbenchError as refusal:
        return None, None, refusal.one_line(), time.perf_counter() - started
    verdict = evaluate(records, slo) if slo is not None else None
    return records, verdict, None, time.perf_counter() - started
