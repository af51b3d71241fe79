"""One simulated replica: a batching policy, a cost model and a clock.

The replica is a small state machine on simpy timers. A step plan that may repeat runs as
one span of up to `max_span_steps` steps whose end times are computed at once; an arrival
in the middle truncates the span after the step in flight, exactly where a step-by-step
engine would first see the new request. Step-end timers are URGENT, so at equal times a
replica finishes its step before an arrival is routed.

With a multi-token decoder (speculative, lookahead) a `MultiTokenStepper` draws and prices
each decode step (the policy never repeats one); its extra tokens are written as bursts
and reported to the policy as `extra`. Vanilla decoding never touches it.

With APAR (`AparBranches`) each step is planned alone (the policy branches), and after it
the branches that reached a fork position in their request's tree start a child.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy
from simpy.events import URGENT

from simulator.cost_models.base import CostModel, StepWork, prefill_reach
from simulator.decoders.apar import AparBranches
from simulator.decoders.stepper import MultiTokenStepper, StepDraw
from simulator.pipeline import StagePipeline
from workbench.recorder import Recorder
from workbench.scheduling.plan import PrefillChunk, StepPlan, StepResult, forward_split
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.sequence import Sequence


class _Timer(simpy.Event):
    """A timeout with an explicit priority (simpy's Timeout is always NORMAL)."""

    def __init__(self, env: simpy.Environment, delay: float, priority: int) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, priority, delay)


def at(env: simpy.Environment, time_s: float, callback: Callable[[], None], urgent: bool) -> None:
    """Run `callback` at absolute simulated time `time_s`."""
    timer = _Timer(env, max(time_s - env.now, 0.0), URGENT if urgent else 1)
    timer.callbacks.append(lambda _event: callback())


class SimReplica:
    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        policy: BatchPolicy,
        cost_model: CostModel,
        recorder: Recorder,
        on_finish: Callable[[Sequence, float], None],
        max_span_steps: int,
        decoder: MultiTokenStepper | None = None,
        pipeline: StagePipeline | None = None,
        apar: AparBranches | None = None,
    ) -> None:
        """pipeline: the stages this replica (a virtual engine of a pipeline-parallel
        replica) shares with its siblings; its steps then run one at a time through them.
        apar: the run's APAR request trees (the policy then forks branches)."""
        self.env = env
        self.index = index
        self.policy = policy
        self.cost_model = cost_model
        self.recorder = recorder
        self.on_finish = on_finish
        self.max_span_steps = max_span_steps
        self.decoder = decoder
        self.pipeline = pipeline
        self.apar = apar
        self._draw: StepDraw | None = None  # the multi-token decode step in flight
        self.clock_s = 0.0  # exact end of the last committed step
        self._plan: StepPlan | None = None
        self._ends: np.ndarray = np.empty(0)  # (k,) end times of the span's steps
        self._steps = 0  # steps of the current span to commit
        self._generation = 0  # invalidates superseded timers
        self._start_at: float | None = None  # a pending start timer's time
        self._idle_s = 0.0  # how long the replica sat idle before the span it starts next
        self._prefill_tokens = 0  # prefill_reach of the last committed step that prefilled
        self._decodes_since_prefill = 0  # decode steps committed since that step
        # The span's plan's chunks: (APAR forks' in the decode forward, prefill forwards).
        self._split: tuple[list[PrefillChunk], list[PrefillChunk]] = ([], [])

    # ------------------------------------------------------------------ arrivals

    def enqueue(self, seq: Sequence, now_s: float) -> None:
        self.policy.add(seq, now_s)
        if self._plan is not None:
            self._truncate(now_s)
        else:
            self._start_later(now_s)  # after every arrival at this instant is queued

    def _truncate(self, now_s: float) -> None:
        """Stop the span after the step in flight at `now_s` (the first ending later)."""
        if self._steps == 1:  # most spans: nothing after the step in flight
            return
        keep = int(np.searchsorted(self._ends[: self._steps], now_s, side="right")) + 1
        if keep < self._steps:
            self._steps = keep
            self._arm(self._ends[keep - 1])

    # ------------------------------------------------------------------ stepping

    def _start_later(self, time_s: float) -> None:
        if self._start_at is None or self._start_at > time_s:
            self._start_at = time_s
            at(self.env, time_s, lambda: self._start(time_s), urgent=False)

    def _start(self, now_s: float) -> None:
        if self._start_at == now_s:
            self._start_at = None
        if self._plan is None:
            self._idle_s += max(now_s - self.clock_s, 0.0)
            self.clock_s = max(self.clock_s, now_s)
            self._next_span()

    def _next_span(self) -> None:
        plan = self.policy.schedule(self.clock_s)
        if plan is None:
            self._plan = None
            self._wake_later()
            return
        self._close_spans(plan.preempted, plan.step - 1)
        self._release_drafts(plan.preempted)
        steps = 1 if self.pipeline else min(plan.repeatable_steps, self.max_span_steps)
        self._split = forward_split(plan) if plan.prefills else ([], [])
        durations = self._durations(plan, steps)  # (steps,)
        if self.apar is not None:
            durations[0] += self.apar.swap_s(plan)
        self._cold_start(plan, durations)
        self._plan = plan
        if self.pipeline is not None:
            tokens = plan.prefill_tokens + (
                self._draw.verified if self._draw is not None else plan.decode_batch_size
            )
            self._ends = np.array([self.pipeline.run(self.clock_s, float(durations[0]), tokens)])
        elif steps == 1:  # the same sum as below, without two numpy calls
            self._ends = durations + self.clock_s
        else:
            self._ends = np.add.accumulate(np.concatenate(([self.clock_s], durations)))[1:]
        self._steps = self._steps_before(plan.replan_at_s, steps)
        self._arm(self._ends[self._steps - 1])

    def _cold_start(self, plan: StepPlan, durations: np.ndarray) -> None:
        """What the span's steps pay for what came before them: its first step for waking an
        idle engine, its first decode steps after a prefill for the prompt's evicting their
        working set. Not for a virtual engine of a pipeline: it shares stages its siblings
        may have kept busy."""
        idle_s, self._idle_s = self._idle_s, 0.0
        if self.pipeline is not None:
            return
        durations[0] += self.cost_model.wake_s(idle_s) if idle_s > 0.0 else 0.0
        if not plan.decode_batch_size or not self._prefill_tokens:
            return
        if self._split[1]:  # a prefill forward runs in this step
            return
        since = self._decodes_since_prefill
        for j in range(min(self.cost_model.after_prefill_steps - since, len(durations))):
            durations[j] += self.cost_model.after_prefill_s(self._prefill_tokens, since + j + 1)

    def _count_since_prefill(self, plan: StepPlan, steps: int) -> None:
        """After committing `steps` steps of `plan`: where the engine stands after a prefill."""
        prefilled = self._split[1]  # (APAR forks' chunks beside decodes: the decode forward's)
        if prefilled:
            self._prefill_tokens = prefill_reach(
                (chunk.tokens for chunk in prefilled), (chunk.context_tokens for chunk in prefilled)
            )
            self._decodes_since_prefill = 0
        elif plan.decode_batch_size:
            self._decodes_since_prefill += steps

    def _steps_before(self, replan_at_s: float | None, steps: int) -> int:
        """The span's steps up to the last one starting before `replan_at_s`: step j + 1
        starts when step j ends, and the first step always runs."""
        if replan_at_s is None or steps == 1:
            return steps
        return 1 + int(np.searchsorted(self._ends[: steps - 1], replan_at_s, side="left"))

    def _durations(self, plan: StepPlan, steps: int) -> np.ndarray:
        self._draw = None
        if self.decoder is not None and plan.decode_batch_size:
            seqs = self.policy.decode_sequences()
            self._draw = self.decoder.plan_step(plan, seqs, self.cost_model)
            return np.array([self._draw.duration_s])
        if plan.prefills:
            work = StepWork.of_plan(plan, self._split)
            return np.array([self.cost_model.step_time_s(work)])
        return self.cost_model.decode_span_s(
            plan.decode_batch_size, plan.decode_context_sum, steps, plan.decode_context_max
        )

    def _arm(self, end_s: float) -> None:
        self._generation += 1
        generation = self._generation
        at(self.env, end_s, lambda: self._span_done(generation), urgent=True)

    def _span_done(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a truncation
        plan, steps = self._plan, self._steps
        assert plan is not None
        self._record_steps(plan, steps)
        self._count_since_prefill(plan, steps)
        self.clock_s = float(self._ends[steps - 1])
        extra = None if self._draw is None else self._bursts(plan.step, self._draw)
        emitting = None if self.apar is None else self.apar.emitting(self.policy, plan)  # type: ignore[arg-type]
        result = self.policy.complete(plan, steps, extra=extra)
        if self.apar is not None:
            assert emitting is not None
            self._after_branch_step(self.apar, plan.step, emitting, result, extra)
        for seq in result.started:
            if math.isnan(self.recorder.first_token_s[seq.owner]):  # math: a scalar
                self.recorder.first_token_s[seq.owner] = self.clock_s
        self._close_spans(result.finished, self.policy.step - 1)
        for seq in result.finished:
            self.recorder.finish_s[seq.request_id] = self.clock_s
            output = seq.generated if self.apar is None else self.apar.finish(seq)
            self.recorder.output_tokens[seq.request_id] = output
            self.recorder.preemptions[seq.request_id] = seq.preemptions
            self.on_finish(seq, self.clock_s)
        self._release_drafts(result.finished)
        self._plan = None
        self._next_span()

    def _wake_later(self) -> None:
        wake_s = self.policy.next_wakeup_s(self.clock_s)
        if wake_s is not None:
            self._start_later(max(wake_s, self.clock_s))

    # ------------------------------------------------------------------ records

    def _record_steps(self, plan: StepPlan, steps: int) -> None:
        draw = self._draw
        drafted, accepted = (0, 0) if draw is None else (draw.drafted, draw.accepted_total)
        alike = {  # every step of the span
            "replica": self.index,
            "batch_size": plan.batch_size,
            "prefill_tokens": plan.prefill_tokens,
            "decode_tokens": plan.decode_batch_size,
            "emitted_tokens": plan.emitting + accepted,
            "drafted_tokens": drafted,
            "accepted_tokens": accepted,
            "verified_tokens": plan.decode_batch_size if draw is None else draw.verified,
            "draft_s": 0.0 if draw is None else draw.draft_s,
        }
        ends = self._ends[:steps]
        columns = self.recorder.steps
        if steps == 1:  # the common case outside decode spans: one row
            columns.append(
                step=plan.step,
                start_s=self.clock_s,
                duration_s=float(ends[0]) - self.clock_s,
                kv_blocks_used=int(plan.kv_blocks_used[0]),
                **alike,
            )
            return
        starts = np.concatenate(([self.clock_s], ends[:-1]))  # (steps,)
        columns.extend(
            step=plan.step + np.arange(steps),
            start_s=starts,
            duration_s=ends - starts,
            kv_blocks_used=plan.kv_blocks_used[:steps],
        )
        columns.extend_constant(steps, **alike)

    def _bursts(self, step: int, draw: StepDraw) -> dict[int, int]:
        """Write the step's multi-token emissions; return the extra tokens per request."""
        extra: dict[int, int] = {}
        for seq, more in zip(draw.sequences, draw.accepted.tolist(), strict=True):
            if more:
                if self.apar is None:  # APAR's book records its branches' emissions
                    self.recorder.burst(seq, self.index, step, 1 + more)
                extra[seq.request_id] = more
        return extra

    def _after_branch_step(
        self,
        apar: AparBranches,
        step: int,
        emitting: list[int],
        result: StepResult,
        extra: dict[int, int] | None,
    ) -> None:
        """APAR: record the branches' emissions and fork; a child's draft state starts from
        its parent's, an ended branch's goes."""
        forks = apar.after_step(self.index, step, emitting, self.policy, result, extra)  # type: ignore[arg-type]
        if self.decoder is not None:
            for parent_id, child_id, shared_tokens in forks:
                self.decoder.fork(parent_id, child_id, shared_tokens)
        self._release_drafts(result.branches_ended)

    def _release_drafts(self, seqs: list[Sequence]) -> None:
        if self.decoder is not None:
            for seq in seqs:
                self.decoder.release(seq.request_id)

    def _close_spans(self, seqs: list[Sequence], last_step: int) -> None:
        for seq in seqs:
            self.recorder.close_span(seq, self.index, last_step)
