"""`calibrate_from`: a stored real pipeline run's measurements, for the simulator.

From the run log a real pipeline run keeps (`info["pipeline_runs"]`):
- each stage's compute as a line in the run's nodes, fitted by least squares on the runs
  that stage computed whole (the head's stage 0 included);
- the per-hop overhead the log does not show (messages, serialisation, the emulated link):
  a run's time from launch to return less its stages' compute, spread over its P hops;
- the head's drafting time per drafted token (`info["pipeline_draft_s"]`);
- the drafted tokens per speculative run (PipeInfer's thresholds vary them) and the share
  of drafted tokens the target accepted: per synchronous run exactly (its commit less the
  bonus token), per asynchronous run from what the committing runs added;
- the share of speculation attempts whose draft came out empty, which pauses speculation
  until the next result (with `p_decay` 0, the default: otherwise the real head retries at
  once with a lower threshold, which the step model does not): counted by the head
  (`info["pipeline_empty_drafts"]`), else, for runs stored before it was, estimated from
  runs per result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.pipeinfer.timing import Link, PipelineTiming
from simulator.stored_runs import stored_run
from workbench.errors import WorkbenchError
from workbench.store.db import ResultsStore

FIELD = "decoder.calibrate_from"


@dataclass(frozen=True)
class PipelineCalibration:
    run_id: str
    stage_fixed_s: np.ndarray  # (P,) seconds per run
    stage_per_node_s: np.ndarray  # (P,) seconds per node
    hop_s: float  # per hop, beyond the stages' compute
    commit_s: float  # the head's time from a commit to the next launch
    draft_token_s: float
    draft_lengths: np.ndarray  # drafted tokens of each speculative run
    draft_outcomes: np.ndarray  # (n, 2): drafted and accepted of each synchronous run
    empty_draft_share: float  # speculation attempts that drafted nothing
    acceptance: AcceptanceDistribution | None

    def timing(self, base: PipelineTiming) -> PipelineTiming:
        """`base` with the measured stages, link and draft."""
        if len(self.stage_fixed_s) != base.stages:
            raise WorkbenchError(
                f"run {self.run_id} had {len(self.stage_fixed_s)} stages, the scenario "
                f"{base.stages}",
                field=FIELD,
            )
        fixed, per_node = self.stage_fixed_s, self.stage_per_node_s

        def stage_cost(stage: int, nodes: int, context: int) -> float:
            return float(fixed[stage] + per_node[stage] * nodes)

        draft = self.draft_token_s
        return PipelineTiming(
            base.stages, base.layers, stage_cost, lambda context: draft,
            Link(self.hop_s, None), base.activation_bytes_per_token, self.commit_s,
        )  # fmt: skip


def calibrate_pipeline(store: ResultsStore | None, run_ref: str) -> PipelineCalibration:
    store, run = stored_run(store, run_ref, FIELD, f"calibrating from run {run_ref!r}")
    info = run["info"] if isinstance(run["info"], dict) else json.loads(run["info"] or "{}")
    if "pipeline_runs" not in info:
        raise WorkbenchError(
            f"run {run['run_id']} is not a real pipeline run (no run log)", field=FIELD
        )
    log = json.loads(info["pipeline_runs"])
    empty = info.get("pipeline_empty_drafts")  # counted by the head since schema 9's runs
    draft_s = float(info.get("pipeline_draft_s", 0.0))
    return from_log(str(run["run_id"]), log, draft_s, None if empty is None else int(empty))


def from_log(
    run_id: str, log: dict, draft_s: float, empty_drafts: int | None = None
) -> PipelineCalibration:
    """empty_drafts: the head's count of speculation attempts that drafted nothing (None:
    an older run, estimated from runs per result)."""
    nodes = np.asarray(log["nodes"], dtype=np.float64)  # (r,)
    stage_s = np.asarray(log["stage_s"], dtype=np.float64)  # (r, P)
    status = np.asarray(log["stage_status"], dtype=object)  # (r, P)
    outcome = np.asarray(log["outcome"], dtype=object)
    fixed, per_node = _fit_stages(nodes, stage_s, status)
    launched = np.asarray(log["launched_s"], dtype=np.float64)
    resolved = np.asarray(log["resolved_s"], dtype=np.float64)
    whole = (outcome != "cancelled") & (status == "computed").all(axis=1)
    alone = whole & _alone(launched, resolved)  # no queueing behind another run
    sample = alone if alone.any() else whole
    # A mean, not a median: throughput pays for the slow hops and pauses too.
    hop = np.mean((resolved - launched - stage_s.sum(axis=1))[sample]) / stage_s.shape[1]
    kinds = np.asarray(log["kind"], dtype=object)
    drafted = np.asarray(log["drafted"], dtype=np.int64)
    speculative, verify = kinds == "speculative", kinds == "verify"
    spec_runs = int(speculative.sum())
    if empty_drafts is None:
        empty_share, empty_attempts = _empty_drafts(len(kinds), spec_runs)
    else:
        attempts = empty_drafts + spec_runs
        empty_share = empty_drafts / attempts if attempts else 0.0
        empty_attempts = float(empty_drafts)
    forwards = drafted.sum() + empty_attempts
    draft_token_s = draft_s / forwards if forwards else 0.0
    committed = np.asarray(log["committed"], dtype=np.int64)
    useful_verify = verify & (outcome == "committed")
    outcomes = np.stack([drafted[useful_verify], committed[useful_verify] - 1], axis=1)
    commit_s = _commit_s(log, drafted * draft_token_s)
    return PipelineCalibration(
        run_id, fixed, per_node, max(float(hop), 0.0), commit_s, draft_token_s,
        drafted[speculative], outcomes, empty_share, _acceptance(log, kinds, drafted),
    )  # fmt: skip


def _alone(launched: np.ndarray, resolved: np.ndarray) -> np.ndarray:
    """Runs in flight with no other: their time beyond compute is the links' alone."""
    order = np.argsort(launched)
    start, end = launched[order], resolved[order]
    ended_before = np.maximum.accumulate(np.r_[-np.inf, end[:-1]])  # latest end before each
    next_start = np.r_[start[1:], np.inf]
    alone = np.empty(len(start), dtype=bool)
    alone[order] = (ended_before <= start) & (end <= next_start)
    return alone


def _empty_drafts(results: int, speculative_runs: int) -> tuple[float, float]:
    """(share of speculation attempts that came out empty, how many): each result at the
    head starts a round of attempts that ends at the first empty one, so with q the empty
    share a round launches (1 − q) / q runs on average; the maximum-likelihood q is
    rounds / (rounds + runs). An estimate: rounds also end at the in-flight limit."""
    if speculative_runs == 0:
        return 0.0, 0.0
    share = results / (results + speculative_runs)
    return share, share * results


def _commit_s(log: dict, draft_s: np.ndarray) -> float:
    """Mean time from a committing run's return to the next launch, less the drafting
    that launch did (the head's own work between them: verification, cache operations,
    bookkeeping, and the pauses of a shared machine)."""
    order = np.argsort(np.asarray(log["launched_s"], dtype=np.float64))
    launched = np.asarray(log["launched_s"], dtype=np.float64)[order]
    drafting, owner = draft_s[order], np.asarray(log["request_id"])[order]
    committing = np.asarray(log["outcome"], dtype=object) == "committed"
    resolved = np.asarray(log["resolved_s"], dtype=np.float64)[committing]
    request = np.asarray(log["request_id"])[committing]
    nxt = np.searchsorted(launched, resolved, side="left")
    found = nxt < len(launched)
    found[found] &= owner[nxt[found]] == request[found]  # not a request's last commit
    gaps = launched[nxt[found]] - resolved[found] - drafting[nxt[found]]
    return float(max(np.mean(gaps), 0.0)) if len(gaps) else 0.0


def _fit_stages(
    nodes: np.ndarray, stage_s: np.ndarray, status: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per stage, seconds = fixed + per_node × nodes over the runs it computed whole."""
    stages = stage_s.shape[1]
    fixed, per_node = np.zeros(stages), np.zeros(stages)
    for stage in range(stages):
        done = status[:, stage] == "computed"
        x, y = nodes[done], stage_s[done, stage]
        if len(np.unique(x)) < 2:
            fixed[stage] = float(np.median(y)) if len(y) else 0.0
            continue
        slope, intercept = np.polyfit(x, y, 1)
        per_node[stage], fixed[stage] = max(slope, 0.0), max(intercept, 0.0)
    return fixed, per_node


def _acceptance(log: dict, kinds: np.ndarray, drafted: np.ndarray) -> AcceptanceDistribution | None:
    """Accepted drafts per run: a histogram from synchronous runs (commit − bonus); for
    asynchronous runs, the accepted share of drafted tokens as an i.i.d. rate."""
    committed = np.asarray(log["committed"], dtype=np.int64)
    outcome = np.asarray(log["outcome"], dtype=object)
    verify = (kinds == "verify") & (outcome == "committed")
    if verify.any():
        k = int(drafted[verify].max())
        counts = np.bincount(np.minimum(committed[verify] - 1, k), minlength=k + 1)
        return AcceptanceDistribution.histogram(counts, k) if k else None
    speculative = kinds == "speculative"
    useful = speculative & (outcome == "committed")
    if not drafted[useful].sum():
        return None
    # A committing speculative run usually follows the one-token run that committed its
    # first guess: its commit is then its accepted drafts (the bonus replacing the first).
    rate = committed[useful].sum() / drafted[useful].sum()
    k = int(drafted[speculative].max())
    return AcceptanceDistribution.iid(float(min(max(rate, 0.0), 1.0)), k)
