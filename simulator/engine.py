"""The simulation: a workload routed over replicas on one simpy clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import simpy
from simpy.core import StopSimulation

from simulator.cost_models.base import CostModel
from simulator.decoders.apar import AparBranches
from simulator.decoders.stepper import MultiTokenStepper
from simulator.pipeline import StagePipeline
from simulator.replica import SimReplica, at
from workbench.recorder import Recorder
from workbench.records import RunRecords
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.routing import Router
from workbench.scheduling.sequence import Sequence
from workbench.workload.requests import Workload

ProgressFn = Callable[[int], None]  # called with the number of newly finished requests


class RunMonitor(Protocol):
    """Watches a run as it goes and may end it early (a capacity search's clearly lost
    probe). Each call returns the reason to stop now, or None."""

    def after_arrivals(self, recorder: Recorder, now_s: float) -> str | None: ...

    def after_finish(self, recorder: Recorder, request_id: int, now_s: float) -> str | None: ...


# Bulk spans are capped so one span's arrays stay small; the cap changes no result.
MAX_SPAN_STEPS = 4096


class Simulation:
    def __init__(
        self,
        workload: Workload,
        policies: list[BatchPolicy],
        cost_models: list[CostModel],
        router: Router,
        *,
        bulk_steps: bool = True,
        progress: ProgressFn | None = None,
        decoders: list[MultiTokenStepper | None] | None = None,
        monitor: RunMonitor | None = None,
        pipelines: list[StagePipeline | None] | None = None,
        apar: AparBranches | None = None,
    ) -> None:
        """decoders: per replica, the multi-token decoder's stepper (None: vanilla).
        monitor: may stop the run early; `stop_reason` then says why. pipelines: per
        replica, the stages it shares (pipeline parallelism: each replica here is one
        virtual engine of a pipelined replica); None: none. apar: the requests' APAR trees
        (every replica's policy forks branches by them)."""
        self.workload = workload
        self.env = simpy.Environment()
        self.recorder = Recorder(len(workload))
        self.apar = apar
        if apar is not None:
            apar.attach(self.recorder)
        self.router = router
        self.policies = policies
        self.progress = progress
        span = MAX_SPAN_STEPS if bulk_steps else 1
        steppers = decoders if decoders is not None else [None] * len(policies)
        stages = pipelines if pipelines is not None else [None] * len(policies)
        self.replicas = [
            SimReplica(self.env, i, p, c, self.recorder, self._on_finish, span, d, s, apar)
            for i, (p, c, d, s) in enumerate(
                zip(policies, cost_models, steppers, stages, strict=True)
            )
        ]
        # Per request as Python ints (prompt, output, predicted): read once each.
        self._lengths = (
            workload.prompt_tokens.tolist(),
            workload.output_tokens.tolist(),
            None if workload.predicted_tokens is None else workload.predicted_tokens.tolist(),
        )
        self._next_request = 0  # closed loop: next request id to issue
        self._releases: dict[float, list[int]] = {}  # closed loop: release time → finished ids
        self.monitor = monitor
        self.stop_reason: str | None = None

    def run(self) -> RunRecords:
        if self.workload.is_closed_loop:
            self._start_closed_loop()
        else:
            self.env.process(self._open_loop_arrivals())
        self.env.run()
        rec = self.recorder
        return RunRecords(
            requests=rec.request_records(self.workload.prompt_tokens),
            steps=rec.step_records(),
            emissions=rec.emission_spans(),
            branches=None if self.apar is None else self.apar.records(),
        )

    # ------------------------------------------------------------------ arrivals

    def _open_loop_arrivals(self):  # simpy process
        arrival = self.workload.arrival_s.tolist()  # Python floats: read once per request
        i, n = 0, len(arrival)
        while i < n:
            t = arrival[i]
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            while i < n and arrival[i] == t:  # simultaneous arrivals are routed together
                self._route(i, t)
                i += 1
            if self.monitor is not None:
                self._stop_if(self.monitor.after_arrivals(self.recorder, t))

    def _route(self, request_id: int, now_s: float) -> None:
        prompts, outputs, predictions = self._lengths
        output = outputs[request_id]
        if self.apar is not None:  # the root stops where its tree says
            output = self.apar.root_tokens(request_id)
            self.apar.start(request_id)
        seq = Sequence(
            request_id=request_id,
            arrival_s=now_s,
            prompt_tokens=prompts[request_id],
            output_tokens=output,
            predicted_tokens=None if predictions is None else predictions[request_id],
        )
        index = self.router.pick(self.policies)
        self.recorder.replica[request_id] = index
        self.recorder.arrival_s[request_id] = now_s
        self.replicas[index].enqueue(seq, now_s)

    def _start_closed_loop(self) -> None:
        concurrency = self.workload.closed_loop_concurrency or 0
        first = min(concurrency, len(self.workload))
        self._next_request = first
        at(self.env, 0.0, lambda: [self._route(i, 0.0) for i in range(first)], urgent=False)

    def _stop_if(self, reason: str | None) -> None:
        if reason is None or self.stop_reason is not None:
            return
        self.stop_reason = reason
        stop = self.env.event()
        stop.callbacks.append(StopSimulation.callback)  # ends env.run() when processed
        stop.succeed(reason)

    def _on_finish(self, seq: Sequence, now_s: float) -> None:
        if self.progress is not None:
            self.progress(1)
        if self.monitor is not None:
            self._stop_if(self.monitor.after_finish(self.recorder, seq.request_id, now_s))
        if not self.workload.is_closed_loop:
            return
        release_s = now_s + self.workload.think_time_s
        pending = self._releases.setdefault(release_s, [])
        if not pending:  # one event per instant, releasing in request order (deterministic)
            at(self.env, release_s, lambda: self._release(release_s), urgent=False)
        pending.append(seq.request_id)

    def _release(self, release_s: float) -> None:
        for _ in sorted(self._releases.pop(release_s)):
            if self._next_request < len(self.workload):
                self._route(self._next_request, release_s)
                self._next_request += 1
