"""Drive a plan: one search per configuration, probes run in parallel, each stored as a run.

Every configuration of `plan.space` gets its own search (`search.py`); at most one probe
per search is in flight and at most `executor.workers` searches are active, started in
index order (cheapest: in order of cost per replica, so the cost bound prunes early). A
probe already in the database under the same SLO is reused, not rerun: an interrupted plan
resumes and a finished one re-reports at once. Probes that cannot run (weights that do not
fit, a TP degree that does not split the heads) make their configuration infeasible.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import WorkbenchError
from workbench.metrics import summarize
from workbench.planning.executor import Executor
from workbench.planning.probe import (
    RATE_PATH,
    REPLICAS_PATH,
    ProbeOutcome,
    ProbeSpec,
    probe_scenario,
    slo_key,
)
from workbench.planning.search import RateAnswer, ReplicaAnswer, max_rate, min_replicas
from workbench.planning.slo import Verdict
from workbench.records import RunMeta, RunRecords
from workbench.runner import git_sha, package_versions
from workbench.scenario.plan import CheapestObjective, MaxRateObjective, PlanConfig
from workbench.scenario.scenario import Scenario
from workbench.store.db import ResultsStore
from workbench.store.ids import new_id

ProgressFn = Callable[[str], None]  # called with a one-line status after every probe


@dataclass
class Configuration:
    """One point of the plan's space and what its search found."""

    index: int
    values: dict[str, Any]
    label: str
    cost_per_replica_usd_h: float | None = None
    search: Generator | None = None
    outcomes: list[ProbeOutcome] = field(default_factory=list)
    answer: RateAnswer | ReplicaAnswer | None = None
    refusal: str | None = None  # why it cannot run at all

    @property
    def replica_cost(self) -> float:
        return self.cost_per_replica_usd_h if self.cost_per_replica_usd_h is not None else 0.0


@dataclass
class PlanRun:
    """A finished plan: its configurations, the probes it ran or reused, its identity."""

    plan_id: str
    scenario: Scenario
    configurations: list[Configuration]
    probes_run: int = 0
    probes_reused: int = 0
    probes_stopped_early: int = 0
    spread: list[ProbeOutcome] = field(default_factory=list)  # the answer re-run with seeds
    wall_s: float = 0.0


class Planner:
    def __init__(
        self,
        scenario: Scenario,
        source: str,
        store: ResultsStore,
        executor: Executor,
        *,
        early_stop: bool = True,
        progress: ProgressFn | None = None,
    ) -> None:
        if scenario.plan is None:
            raise WorkbenchError("the scenario has no plan section", source=source, field="plan")
        self.scenario = scenario
        self.plan: PlanConfig = scenario.plan
        self.source = source
        self.store = store
        self.executor = executor
        self.early_stop = early_stop
        self.progress = progress
        self.slo_json = None if self.plan.slo is None else self.plan.slo.model_dump_json()
        self.slo_id = "none" if self.plan.slo is None else slo_key(self.plan.slo)
        self.known = self._stored_probes()
        self.run_state = PlanRun(self._plan_id(), scenario, self._configurations())
        self._in_flight: dict[Any, tuple[Configuration, ProbeSpec, Scenario]] = {}
        self._best: tuple[float, int] | None = None  # (cost, index) of the cheapest passing

    # ------------------------------------------------------------------ setup

    def _plan_id(self) -> str:
        text = self.scenario.config_json()
        return uuid.uuid5(uuid.NAMESPACE_URL, text).hex[:12]

    def _configurations(self) -> list[Configuration]:
        space = self.plan.space
        if isinstance(self.plan.objective, CheapestObjective) and REPLICAS_PATH in space:
            raise WorkbenchError(
                "the cheapest objective searches hardware.replicas itself: drop it from the space",
                source=self.source,
                field=f"plan.space.{REPLICAS_PATH}",
            )
        paths = list(space)
        configs = []
        for index, combo in enumerate(itertools.product(*(space[p] for p in paths))):
            values = dict(zip(paths, combo, strict=True))
            scenario = probe_scenario(self.scenario, values, self.source)  # bad paths: errors
            label = " · ".join(f"{_short(p)}={_short_value(v)}" for p, v in values.items())
            config = Configuration(index, values, label or "baseline")
            if isinstance(self.plan.objective, CheapestObjective):
                config.cost_per_replica_usd_h = self._replica_cost(scenario)
            configs.append(config)
        return configs

    def _replica_cost(self, scenario: Scenario) -> float:
        from simulator.catalogs.hardware import get_gpu

        objective = self.plan.objective
        assert isinstance(objective, CheapestObjective)
        gpu = scenario.hardware.gpu
        price = objective.prices_usd_per_hour.get(gpu, get_gpu(gpu).hourly_price_usd)
        if price is None:
            raise WorkbenchError(
                f"no hourly price for GPU {gpu!r}: give one in prices_usd_per_hour",
                source=self.source,
                field="plan.objective.prices_usd_per_hour",
            )
        hardware = scenario.hardware
        return price * hardware.tensor_parallel * hardware.pipeline_parallel  # GPUs per replica

    def _stored_probes(self) -> dict[str, tuple[str, Verdict | None, dict]]:
        """Probes of earlier runs of any plan judged by this SLO: hash → (run, verdict,
        summary)."""
        rows = self.store.connection.execute(
            "SELECT scenario_hash, run_id, info FROM runs "
            "WHERE json_extract_string(info, '$.plan_slo') = ?",
            [self.slo_id],
        ).fetchall()
        known = {}
        for scenario_hash, run_id, info in rows:
            data = json.loads(info)
            verdict = data.get("plan_verdict")
            summary = json.loads(data.get("plan_summary", "{}"))
            known[scenario_hash] = (
                run_id,
                None if verdict is None else Verdict.from_json(json.loads(verdict)),
                summary,
            )
        return known

    # ------------------------------------------------------------------ driving searches

    def run(self) -> PlanRun:
        started = time.perf_counter()
        objective = self.plan.objective
        if objective.kind == "what_if":
            self._run_what_if()
        else:
            order = self.run_state.configurations
            if isinstance(objective, CheapestObjective):
                order = sorted(order, key=lambda c: (c.replica_cost, c.index))
            self._drive(deque(order))
            self._run_spread()
        self.run_state.wall_s = time.perf_counter() - started
        return self.run_state

    def _drive(self, waiting: deque[Configuration]) -> None:
        while waiting or self._in_flight:
            while waiting and len(self._in_flight) < self.executor.workers:
                config = waiting.popleft()
                config.search = self._new_search(config)
                self._advance(config, None)
            if not self._in_flight:
                continue
            for handle in self.executor.wait_any(list(self._in_flight)):
                config, spec, scenario = self._in_flight.pop(handle)
                outcome = self._collect(spec, scenario, self.executor.result(handle))
                self._after_probe(config, outcome)

    def _new_search(self, config: Configuration) -> Generator:
        objective = self.plan.objective
        if isinstance(objective, MaxRateObjective):
            start = objective.start_rate_per_s or _scenario_rate(self.scenario, self.source)
            return max_rate(start, objective.precision, objective.min_rate_per_s)
        assert isinstance(objective, CheapestObjective)
        return min_replicas(objective.max_replicas, lambda: self._useful_replicas(config))

    def _useful_replicas(self, config: Configuration) -> int:
        """The most replicas of `config` that would still beat the best found (ties go to
        the lower configuration index)."""
        objective = self.plan.objective
        assert isinstance(objective, CheapestObjective)
        if self._best is None or config.replica_cost <= 0:
            return objective.max_replicas
        best_cost, best_index = self._best
        count = int(best_cost // config.replica_cost)
        if count * config.replica_cost == best_cost and config.index > best_index:
            count -= 1  # an equal cost loses the tie
        return max(count, 0)

    def _advance(self, config: Configuration, verdict: bool | None) -> None:
        """Feed the search its verdict; submit (or reuse) its next probe, until one is in
        flight or the search has its answer."""
        assert config.search is not None
        while True:
            try:
                point = next(config.search) if verdict is None else config.search.send(verdict)
            except StopIteration as stop:
                self._finish(config, stop.value)
                return
            spec = ProbeSpec(config.index, {**config.values, **self._point_values(point)})
            scenario = probe_scenario(self.scenario, spec.values, self.source)
            reused = self._reuse(spec, scenario)
            if reused is None:
                args = (scenario.model_dump_json(), self.slo_json, self.early_stop)
                self._in_flight[self.executor.submit(args)] = (config, spec, scenario)
                return
            config.outcomes.append(reused)
            self._report(config, reused)
            if reused.verdict is None:  # stored without a verdict: cannot happen under an SLO
                raise WorkbenchError(f"stored probe {reused.run_id} has no verdict")
            verdict = reused.verdict.passed

    def _point_values(self, point: float | int) -> dict[str, Any]:
        values: dict[str, Any] = {"workload.num_requests": self._probe_requests()}
        if isinstance(self.plan.objective, MaxRateObjective):
            values[RATE_PATH] = point
        else:
            assert isinstance(self.plan.objective, CheapestObjective)
            values[RATE_PATH] = self.plan.objective.rate_per_s
            values[REPLICAS_PATH] = point
        return values

    def _probe_requests(self) -> int:
        return self.plan.requests_per_probe or self.scenario.workload.num_requests

    def _after_probe(self, config: Configuration, outcome: ProbeOutcome) -> None:
        config.outcomes.append(outcome)
        self._report(config, outcome)
        if outcome.error is not None:
            config.refusal = outcome.error
            assert config.search is not None
            config.search.close()
            config.search = None
            return
        assert outcome.verdict is not None
        self._advance(config, outcome.verdict.passed)

    def _finish(self, config: Configuration, answer: RateAnswer | ReplicaAnswer) -> None:
        config.answer = answer
        config.search = None
        if isinstance(answer, ReplicaAnswer) and answer.replicas is not None:
            candidate = (answer.replicas * config.replica_cost, config.index)
            if self._best is None or candidate < self._best:
                self._best = candidate

    # ------------------------------------------------------------------ probes

    def _reuse(self, spec: ProbeSpec, scenario: Scenario) -> ProbeOutcome | None:
        stored = self.known.get(scenario.config_hash())
        if stored is None:
            return None
        self.run_state.probes_reused += 1
        run_id, verdict, _ = stored
        return ProbeOutcome(spec, scenario.config_hash(), verdict, run_id=run_id, reused=True)

    def _collect(self, spec: ProbeSpec, scenario: Scenario, result: tuple) -> ProbeOutcome:
        records, verdict, refusal, wall_s = result
        outcome = ProbeOutcome(spec, scenario.config_hash(), verdict, refusal, wall_s=wall_s)
        if records is None:
            return outcome
        self.run_state.probes_run += 1
        if "stopped_early" in records.info:
            self.run_state.probes_stopped_early += 1
        run_id = self._store(spec, scenario, records, verdict, wall_s)
        summary = json.loads(records.info["plan_summary"])
        self.known[outcome.scenario_hash] = (run_id, verdict, summary)
        return ProbeOutcome(spec, outcome.scenario_hash, verdict, None, run_id, wall_s)

    def _store(
        self,
        spec: ProbeSpec,
        scenario: Scenario,
        records: RunRecords,
        verdict: Verdict | None,
        wall_s: float,
    ) -> str:
        """Write the probe as a run; its `info` carries what a report of the plan needs."""
        summary = summarize(records, scenario.slo)
        config = self._configuration(spec.config)
        records.info.update(
            {
                "scheduler": scenario.scheduler.kind,
                "decoder": scenario.decoder.kind,
                "plan_id": self.run_state.plan_id,
                "plan_objective": self.plan.objective.kind,
                "plan_slo": self.slo_id,
                "plan_slo_json": self.slo_json or "null",
                "plan_config": str(spec.config),
                "plan_label": config.label if config is not None else "",
                "plan_cost_per_replica": json.dumps(config and config.cost_per_replica_usd_h),
                "plan_point": json.dumps(spec.values),
                "plan_verdict": json.dumps(None if verdict is None else verdict.to_json()),
                "plan_summary": json.dumps(summary),
            }
        )
        finished = time.time()
        meta = RunMeta(
            run_id=new_id(),
            scenario_name=scenario.name,
            scenario_hash=scenario.config_hash(),
            config_json=scenario.config_json(),
            backend="sim",
            decoder=scenario.decoder.kind,
            scheduler=scenario.scheduler.kind,
            seed=scenario.seed,
            versions=package_versions(),
            git_sha=git_sha(),
            started_at=finished - wall_s,
            finished_at=finished,
        )
        return self.store.write_run(meta, records)

    def _configuration(self, index: int) -> Configuration | None:
        configs = self.run_state.configurations
        return configs[index] if index < len(configs) else None

    def _report(self, config: Configuration, outcome: ProbeOutcome) -> None:
        if self.progress is None:
            return
        state = self.run_state
        done = sum(c.answer is not None or c.refusal is not None for c in state.configurations)
        self.progress(
            f"{done}/{len(state.configurations)} configurations · {state.probes_run} simulated "
            f"({state.probes_stopped_early} stopped early) · {state.probes_reused} reused"
        )

    # ------------------------------------------------------------------ spread, what-if

    def _run_spread(self) -> None:
        """Re-run the answer's deciding probe with `spread_seeds` other seeds."""
        from workbench.planning.answer import best_configuration, deciding_outcome

        best = best_configuration(self.run_state, self.plan)
        if best is None or self.plan.spread_seeds == 0:
            return
        deciding = deciding_outcome(best)
        assert deciding is not None
        seeds = [self.scenario.seed + k for k in range(1, self.plan.spread_seeds + 1)]
        self.run_state.spread = self._run_points(
            [ProbeSpec(best.index, {**deciding.spec.values, "seed": seed}) for seed in seeds],
            early_stop=False,
        )

    def _run_what_if(self) -> None:
        objective = self.plan.objective
        assert objective.kind == "what_if"
        variants = {"baseline": {}, **objective.variants}
        specs = [
            ProbeSpec(
                i, {**overrides, RATE_PATH: rate, "workload.num_requests": self._probe_requests()}
            )
            for i, (overrides, rate) in enumerate(
                itertools.product(variants.values(), objective.rates_per_s)
            )
        ]
        for spec in specs:  # every variant checked before any probe runs
            probe_scenario(self.scenario, spec.values, self.source)
        names = [name for name in variants for _ in objective.rates_per_s]
        self.run_state.configurations = [
            Configuration(i, spec.values, names[i]) for i, spec in enumerate(specs)
        ]
        for config, outcome in zip(
            self.run_state.configurations, self._run_points(specs, early_stop=False), strict=True
        ):
            config.outcomes.append(outcome)
            config.refusal = outcome.error

    def _run_points(self, specs: list[ProbeSpec], *, early_stop: bool) -> list[ProbeOutcome]:
        """Run (or reuse) independent probes, in parallel; outcomes in the order given."""
        outcomes: dict[int, ProbeOutcome] = {}
        pending: dict[Any, tuple[int, ProbeSpec, Scenario]] = {}
        queue = deque(enumerate(specs))
        while queue or pending:
            while queue and len(pending) < self.executor.workers:
                i, spec = queue.popleft()
                scenario = probe_scenario(self.scenario, spec.values, self.source)
                if (reused := self._reuse(spec, scenario)) is not None:
                    outcomes[i] = reused
                    continue
                args = (scenario.model_dump_json(), self.slo_json, early_stop)
                pending[self.executor.submit(args)] = (i, spec, scenario)
            if not pending:
                continue
            for handle in self.executor.wait_any(list(pending)):
                i, spec, scenario = pending.pop(handle)
                outcomes[i] = self._collect(spec, scenario, self.executor.result(handle))
        return [outcomes[i] for i in range(len(specs))]

    def summary_of(self, outcome: ProbeOutcome) -> dict:
        """The stored summary (vLLM keys) of a probe's run."""
        return self.known.get(outcome.scenario_hash, (None, None, {}))[2]


def _scenario_rate(scenario: Scenario, source: str) -> float:
    rate = getattr(scenario.workload.arrival, "rate_per_s", None)
    if rate is None:
        raise WorkbenchError(
            "a rate search needs an arrival process with rate_per_s (or start_rate_per_s)",
            source=source,
            field="workload.arrival",
        )
    return float(rate)


def _short(path: str) -> str:
    return {"hardware.gpu": "gpu", "hardware.tensor_parallel": "tp"}.get(path, path.split(".")[-1])


def _short_value(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("kind", "")
        rest = ",".join(
            f"{k}={v}" for k, v in value.items() if k != "kind" and not isinstance(v, dict)
        )
        return f"{kind}({rest})" if rest else str(kind)
    return str(value)
