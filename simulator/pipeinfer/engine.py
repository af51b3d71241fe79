"""PipeInfer's step model: runs through pipeline stages on a simpy clock, batch 1.

The same three policies as the real backend (`real_backend/pipeline/decoding.py`):
- `pipeline`: one run in flight, the newest token; every token crosses every stage.
- `pipeinfer` with `asynchronous: false`: one run in flight, the newest token and k drafted.
- `pipeinfer`: after every commit a one-token run, then, while no result waits at the head,
  speculative runs each drafting k tokens after the previous one's tail, so runs chain and
  the stages stay busy; a commit cancels every live run it leaves unable to help, and each
  stage drops a cancelled run before starting it or at the next layer boundary.

What is drawn instead of computed: whether drafted tokens match the target. A run's drafts
are accepted up to the first mismatch, its count drawn from an `AcceptanceDistribution`
(capped by the run's drafts); a run chained after a mismatch is useless. What is simplified:
drafts are chains of `draft_tokens` (no token trees; PipeInfer's confidence thresholds and
p_adjust, which shorten drafts, are summarised by a measured draft length when calibrated),
a cancel reaches stage s after (P − s) hops, and stage 0 runs on the head between drafts.

Runs complete in launch order at the head (stages serve first come, first served); a
request's commits are its steps in the records, as on the real backend, and every run's
fate goes to `info["pipeline_runs"]` in the real run log's columns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np
import simpy

from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.pipeinfer.timing import PipelineTiming
from workbench.recorder import Recorder
from workbench.records import RunRecords
from workbench.workload.requests import Workload

NEVER = math.inf


@dataclass(frozen=True)
class Policy:
    kind: str  # pipeline | pipeinfer
    asynchronous: bool
    draft_tokens: int  # k
    max_runs_in_flight: int
    continue_chain: bool = False  # `after_commit: continue`: keep an agreeing chain going
    draft_lengths: np.ndarray | None = None  # measured drafts per run to draw k from
    # Measured (drafted, accepted) pairs of synchronous runs, drawn together: a draft that
    # stops early is one the target often rejects, which separate draws would lose.
    draft_outcomes: np.ndarray | None = None  # (n, 2)
    # PipeInfer's confidence threshold: the share of speculation attempts whose draft comes
    # out empty (one draft forward, no run); speculation then waits for the next result.
    empty_draft_share: float = 0.0


@dataclass
class SimRun:
    run_id: int
    request_id: int
    kind: str  # prefill | token | verify | speculative
    nodes: int
    drafted: int
    context: int  # tokens cached before its nodes (prompt included)
    committed_at_launch: int  # output tokens committed when launched
    first_draft: int = 0  # output position its first drafted token guesses
    accepted: int = 0  # its leading drafts that match the target
    wrong_before: float = NEVER  # first mismatching draft of the chain before it
    launched_s: float = 0.0
    cancelled_s: float | None = None
    stage_s: list[float] = field(default_factory=list)
    stage_status: list[str] = field(default_factory=list)


@dataclass
class _Request:
    request_id: int
    prompt: int
    max_new: int
    committed: int = 0  # output tokens committed
    live: list[SimRun] = field(default_factory=list)
    chain_tail: int = 0  # output position after the chain of drafts
    chain_wrong: float = NEVER  # first mismatching draft in the chain
    chain_run: SimRun | None = None  # the chain's newest speculative run
    launched_since_result: int = 0
    paused: bool = False  # an empty draft: no speculation until the next result
    resolved_drafted: int = 0
    resolved_verified: int = 0
    done: bool = False


class PipelineSimulation:
    def __init__(
        self,
        timing: PipelineTiming,
        policy: Policy,
        acceptance: AcceptanceDistribution | None,
        rng: np.random.Generator,
    ) -> None:
        self.timing = timing
        self.policy = policy
        self.acceptance = acceptance
        self.rng = rng
        self.env = simpy.Environment()
        self.queues = [simpy.Store(self.env) for _ in range(timing.stages)]
        self.results = simpy.Store(self.env)
        self.log: dict[str, list] = {
            name: []
            for name in (
                "run_id", "request_id", "kind", "nodes", "drafted", "launched_s",
                "resolved_s", "outcome", "committed", "stage_s", "stage_status",
            )
        }  # fmt: skip
        self.draft_s = 0.0
        self.empty_drafts = 0  # speculation attempts that drafted nothing
        self._ids = 0
        self._cancelled: list[SimRun] = []  # to log once every stage has let go of them
        for stage in range(1, timing.stages):
            self.env.process(self._stage(stage))

    # ------------------------------------------------------------------ serving

    def serve(self, workload: Workload) -> RunRecords:
        recorder = Recorder(len(workload))
        self.env.process(self._serve_all(workload, recorder))
        self.env.run()
        records = RunRecords(
            requests=recorder.request_records(workload.prompt_tokens),
            steps=recorder.step_records(),
            emissions=recorder.emission_spans(),
        )
        records.info["pipeline_runs"] = json.dumps(self.log, separators=(",", ":"))
        records.info["pipeline_draft_s"] = repr(float(self.draft_s))
        records.info["pipeline_empty_drafts"] = str(self.empty_drafts)
        return records

    def _serve_all(self, workload: Workload, recorder: Recorder) -> Generator:
        step = 0
        for request_id in range(len(workload)):
            arrival = float(workload.arrival_s[request_id])
            if np.isnan(arrival):  # closed loop, one client: sent when the last one ended
                arrival = self.env.now
            if arrival > self.env.now:
                yield self.env.timeout(arrival - self.env.now)
            recorder.arrival_s[request_id] = arrival
            recorder.replica[request_id] = 0
            r = _Request(
                request_id,
                int(workload.prompt_tokens[request_id]),
                int(workload.output_tokens[request_id]),
            )
            commits: list[tuple[float, float, int, int, int, int]] = []
            yield from self._generate(r, commits)
            step = _record_request(recorder, r, commits, step)
        while len(self.log["run_id"]) < self._ids:  # cancelled runs still coming back
            run = yield self.results.get()
            self._log(run, "cancelled", 0)

    # ------------------------------------------------------------------ the head

    def _generate(self, r: _Request, commits: list) -> Generator:
        started = self.env.now
        yield from self._launch(r, "prefill", nodes=r.prompt, drafted=0)
        last = started
        while not r.done:
            if self.results.items or not self._may_speculate(r):
                run = yield self.results.get()
                if self._complete(r, run, commits, last):
                    last = self.env.now
                    if not r.done:
                        yield self.env.timeout(self.timing.commit_s)  # the head's bookkeeping
                        yield from self._launch_next(r)
            else:
                yield from self._speculate(r)

    def _launch(self, r: _Request, kind: str, nodes: int, drafted: int) -> Generator:
        """Compute stage 0 of a new run on the head, then send it down the pipeline."""
        context = {"prefill": 0, "speculative": r.prompt + r.chain_tail}.get(
            kind,
            r.prompt + r.committed - 1,  # token, verify: the newest token is a node
        )
        run = SimRun(self._ids, r.request_id, kind, nodes, drafted, context, r.committed)
        self._ids += 1
        run.launched_s = self.env.now
        r.live.append(run)
        compute = self.timing.stage_cost(0, nodes, run.context)
        yield self.env.timeout(compute)
        run.stage_s.append(compute)
        run.stage_status.append("computed")
        self._forward(run, 0)
        return run

    def _speculate(self, r: _Request) -> Generator:
        """Draft a chain after the chain's tail and launch it (PipeInfer's asynchronous
        speculation): its drafts guess output positions chain_tail, chain_tail + 1, ...
        An empty draft launches nothing and pauses speculation until the next result."""
        if self.rng.random() < self.policy.empty_draft_share:
            self.empty_drafts += 1
            yield from self._draft(r, 1, r.prompt + r.chain_tail)
            r.paused = True
            return
        k = min(self._draft_length(), r.max_new - 1 - r.chain_tail)
        yield from self._draft(r, k, r.prompt + r.chain_tail)
        first, wrong_before = r.chain_tail, r.chain_wrong
        accepted = self._accepted(k)
        r.chain_tail += k
        if accepted < k:
            r.chain_wrong = min(r.chain_wrong, first + accepted)
        r.launched_since_result += 1
        run = yield from self._launch(r, "speculative", nodes=k, drafted=k)
        run.first_draft, run.accepted, run.wrong_before = first, accepted, wrong_before
        r.chain_run = run

    def _verify_draft(self, room: int) -> tuple[int, int]:
        """Drafted and accepted tokens of a synchronous run with `room` tokens left."""
        pairs = self.policy.draft_outcomes
        if pairs is None or len(pairs) == 0:
            k = min(self._draft_length(), room)
            return k, self._accepted(k)
        drafted, accepted = pairs[self.rng.integers(len(pairs))]
        k = min(int(drafted), room)
        return k, min(int(accepted), k)

    def _draft_length(self) -> int:
        lengths = self.policy.draft_lengths
        if lengths is None or len(lengths) == 0:
            return self.policy.draft_tokens
        return int(lengths[self.rng.integers(len(lengths))])

    def _draft(self, r: _Request, k: int, context: int) -> Generator:
        seconds = sum(self.timing.draft_cost(context + i) for i in range(k))
        self.draft_s += seconds
        yield self.env.timeout(seconds)

    def _accepted(self, k: int) -> int:
        if self.acceptance is None or k == 0:
            return 0
        return int(self.acceptance.sample(self.rng, np.array([k]))[0])

    def _may_speculate(self, r: _Request) -> bool:
        p = self.policy
        if p.kind != "pipeinfer" or not p.asynchronous or r.committed == 0 or r.paused:
            return False
        room = r.max_new - 1 - r.chain_tail
        return room > 0 and len(r.live) < p.max_runs_in_flight

    def _launch_next(self, r: _Request) -> Generator:
        """After a commit: the newest token alone, or with k drafts (synchronous); the chain
        restarts after it, unless it goes on (`continue_chain`, still agreeing, tail live)."""
        if not self._chain_goes_on(r):
            r.chain_tail, r.chain_wrong, r.chain_run = r.committed, NEVER, None
        r.launched_since_result = 0
        if self.policy.kind == "pipeinfer" and not self.policy.asynchronous:
            k, accepted = self._verify_draft(r.max_new - 1 - r.committed)
            yield from self._draft(r, k, r.prompt + r.committed)
            run = yield from self._launch(r, "verify", nodes=1 + k, drafted=k)
            run.first_draft, run.accepted = r.committed, accepted
        else:
            yield from self._launch(r, "token", nodes=1, drafted=0)

    def _chain_goes_on(self, r: _Request) -> bool:
        tail = r.chain_run
        if not self.policy.continue_chain or tail is None or tail not in r.live:
            return False
        return r.chain_wrong >= r.committed and r.chain_tail >= r.committed

    # ------------------------------------------------------------------ results

    def _complete(self, r: _Request, run: SimRun, commits: list, last: float) -> bool:
        """Take a run back at the head; True when it committed tokens."""
        r.launched_since_result, r.paused = 0, False
        if run.cancelled_s is not None or run.request_id != r.request_id:
            self._log(run, "cancelled", 0)
            return False
        r.live.remove(run)
        new = min(self._resolve(r, run), r.max_new - r.committed)
        if new <= 0:
            r.resolved_drafted += run.drafted
            r.resolved_verified += run.nodes
            self._log(run, "discarded", 0)
            return False
        self._commit(r, run, new, commits, last)
        self._log(run, "committed", new)
        return True

    def _resolve(self, r: _Request, run: SimRun) -> int:
        """Output tokens `run` commits beyond `r.committed` (0: it cannot help)."""
        if run.kind == "prefill":
            return 1
        if run.kind in ("token", "verify"):
            if r.committed != run.committed_at_launch:
                return 0
            return 1 + run.accepted
        end = run.first_draft + run.drafted  # positions first_draft..end-1 drafted
        if run.wrong_before < r.committed or r.committed <= run.first_draft:
            return 0  # its context went wrong, or the commits do not reach its nodes
        if r.committed > end or run.first_draft + run.accepted < r.committed:
            return 0  # the commits left its chain
        return run.first_draft + run.accepted + 1 - r.committed

    def _commit(self, r: _Request, run: SimRun, new: int, commits: list, last: float) -> None:
        r.committed += new
        prefill = r.prompt if run.kind == "prefill" else 0
        verified = 0 if prefill else run.nodes + r.resolved_verified
        commits.append(
            (last, self.env.now, new, prefill, run.drafted + r.resolved_drafted, verified)
        )
        r.resolved_drafted = r.resolved_verified = 0
        r.done = r.committed >= r.max_new
        stale = list(r.live) if r.done else [x for x in r.live if not self._compatible(r, x)]
        for other in stale:
            self._cancel(r, other)

    def _compatible(self, r: _Request, run: SimRun) -> bool:
        if run.kind in ("token", "verify"):
            return r.committed == run.committed_at_launch
        if run.wrong_before < r.committed:
            return False
        covered = r.committed - run.first_draft  # its drafts the commits already reach
        return covered <= 0 or (
            covered <= run.accepted and r.committed <= run.first_draft + run.drafted
        )

    def _cancel(self, r: _Request, run: SimRun) -> None:
        r.live.remove(run)
        r.resolved_drafted += run.drafted
        r.resolved_verified += run.nodes
        run.cancelled_s = self.env.now
        self._cancelled.append(run)

    # ------------------------------------------------------------------ stages

    def _forward(self, run: SimRun, stage: int) -> None:
        """Send `run` from `stage` to the next one, or its choices back to the head."""
        last = stage == self.timing.stages - 1
        delay = self.timing.return_s() if last else self.timing.hop_s(run.nodes)
        target = self.results if last else self.queues[stage + 1]
        self.env.process(self._deliver(target, run, delay))

    def _deliver(self, target: simpy.Store, run: SimRun, delay: float) -> Generator:
        yield self.env.timeout(delay)
        yield target.put(run)

    def _heard(self, run: SimRun, stage: int) -> bool:
        """Has the cancel of `run` reached `stage`? It travels back from the last stage."""
        if run.cancelled_s is None:
            return False
        hops = self.timing.stages - stage
        return self.env.now >= run.cancelled_s + hops * self.timing.link.latency_s

    def _stage(self, stage: int) -> Generator:
        layers = self.timing.layers[stage]
        while True:
            run = yield self.queues[stage].get()
            if self._heard(run, stage):
                run.stage_s.append(0.0)
                run.stage_status.append("skipped")
                self._maybe_log_cancelled(run)
                continue
            per_layer = self.timing.stage_cost(stage, run.nodes, run.context) / layers
            started, status = self.env.now, "computed"
            for _ in range(layers):
                if self._heard(run, stage):
                    status = "aborted"
                    break
                yield self.env.timeout(per_layer)
            run.stage_s.append(self.env.now - started)
            run.stage_status.append(status)
            if status == "computed" and not self._heard(run, stage):
                self._forward(run, stage)
            else:
                self._maybe_log_cancelled(run)

    def _maybe_log_cancelled(self, run: SimRun) -> None:
        """A cancelled run leaves the record when a stage drops it (its later stages never
        saw it)."""
        missing = self.timing.stages - len(run.stage_s)
        run.stage_s += [0.0] * missing
        run.stage_status += ["skipped"] * missing
        self._log(run, "cancelled", 0)

    def _log(self, run: SimRun, outcome: str, committed: int) -> None:
        row = {
            "run_id": run.run_id,
            "request_id": run.request_id,
            "kind": run.kind,
            "nodes": run.nodes,
            "drafted": run.drafted,
            "launched_s": run.launched_s,
            "resolved_s": self.env.now,
            "outcome": outcome,
            "committed": committed,
            "stage_s": list(run.stage_s),
            "stage_status": list(run.stage_status),
        }
        for name, value in row.items():
            self.log[name].append(value)


def _record_request(recorder: Recorder, r: _Request, commits: list, step: int) -> int:
    """One step per commit, as the real pipeline server records them."""
    for start, end, tokens, prefill, drafted, verified in commits:
        decode = prefill == 0
        recorder.steps.append(
            replica=0, step=step, start_s=start, duration_s=end - start, batch_size=1,
            prefill_tokens=prefill, decode_tokens=int(decode), kv_blocks_used=0,
            emitted_tokens=tokens, drafted_tokens=drafted,
            accepted_tokens=tokens - 1 if decode else 0, verified_tokens=verified,
            draft_s=0.0,  # the head drafts beside the stages, outside a commit's span
        )  # fmt: skip
        recorder.span(r.request_id, 0, step, step, tokens)
        step += 1
    recorder.first_token_s[r.request_id] = commits[0][1]
    recorder.finish_s[r.request_id] = commits[-1][1]
    recorder.output_tokens[r.request_id] = r.committed
    return step
