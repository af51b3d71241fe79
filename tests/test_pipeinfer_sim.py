"""PipeInfer's step model in the simulator (simulator/pipeinfer): the three policies priced
by hand on a fixed pipeline, every run logged once, and the records' invariants."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.pipeinfer.engine import PipelineSimulation, Policy
from simulator.pipeinfer.timing import Link, PipelineTiming, even_layers
from workbench.invariants import violations
from workbench.records import RunRecords
from workbench.workload.requests import Workload

STAGE_S, PER_NODE_S, DRAFT_S, HOP_S = 0.010, 0.001, 0.002, 0.0005


def _timing(stages: int = 4) -> PipelineTiming:
    return PipelineTiming(
        stages,
        even_layers(32, stages),
        lambda stage, nodes, context: STAGE_S + PER_NODE_S * nodes,
        lambda context: DRAFT_S,
        Link(HOP_S, None),
        8192,
    )


def _serve(policy: Policy, rate: float, requests: int = 2, output: int = 40) -> RunRecords:
    workload = Workload(
        arrival_s=np.zeros(requests),
        prompt_tokens=np.full(requests, 16),
        output_tokens=np.full(requests, output),
    )
    acceptance = AcceptanceDistribution.iid(rate, policy.draft_tokens or 1)
    return PipelineSimulation(_timing(), policy, acceptance, np.random.default_rng(0)).serve(
        workload
    )


def _runs(records: RunRecords) -> dict:
    return json.loads(records.info["pipeline_runs"])


def test_pipelined_decoding_crosses_every_stage_per_token() -> None:
    records = _serve(Policy("pipeline", False, 0, 1), rate=0.0)
    # A one-token run: 4 stages of 11 ms, 3 hops and the way back of 0.5 ms each.
    per_token = 4 * (STAGE_S + PER_NODE_S) + 4 * HOP_S
    decode = records.steps.duration_s[records.steps.decode_tokens == 1]
    assert decode == pytest.approx(np.full(len(decode), per_token))
    assert records.requests.output_tokens.tolist() == [40, 40]


def test_synchronous_speculation_commits_every_draft_when_all_are_right() -> None:
    records = _serve(Policy("pipeinfer", False, 4, 1), rate=1.0)
    decode = records.steps.decode_tokens == 1
    assert set(records.steps.emitted_tokens[decode].tolist()) <= {5, 4, 3, 2, 1}
    assert records.steps.emitted_tokens[decode][:5].tolist() == [5] * 5  # k drafts + bonus
    # Drafting 4 tokens, then a 5-node run through the 4 stages and back.
    per_run = 4 * DRAFT_S + 4 * (STAGE_S + 5 * PER_NODE_S) + 4 * HOP_S
    assert records.steps.duration_s[decode][1] == pytest.approx(per_run)


@pytest.mark.parametrize("rate", [0.0, 0.5, 1.0])
def test_every_run_is_logged_once_and_the_records_hold(rate: float) -> None:
    records = _serve(Policy("pipeinfer", True, 3, 6), rate=rate, requests=3)
    runs = _runs(records)
    assert sorted(runs["run_id"]) == list(range(len(runs["run_id"])))
    assert set(runs["outcome"]) <= {"committed", "discarded", "cancelled"}
    committed = np.array(runs["committed"])
    assert committed.sum() == records.requests.output_tokens.sum() == 120
    assert violations(records) == []
    for status, outcome in zip(runs["stage_status"], runs["outcome"], strict=True):
        if outcome == "committed":
            assert status == ["computed"] * 4  # only whole runs commit


def test_asynchronous_speculation_keeps_several_runs_in_flight_and_wins_when_drafts_hold() -> None:
    sync = _serve(Policy("pipeinfer", False, 4, 1), rate=0.95)
    asynchronous = _serve(Policy("pipeinfer", True, 4, 8), rate=0.95)
    launched = np.array(_runs(asynchronous)["launched_s"])
    resolved = np.array(_runs(asynchronous)["resolved_s"])
    most_in_flight = max(((launched <= t) & (resolved > t)).sum() for t in launched)
    assert most_in_flight > 2
    assert asynchronous.requests.finish_s.max() < sync.requests.finish_s.max()


def test_a_wrong_draft_leaves_the_output_to_the_one_token_runs() -> None:
    records = _serve(Policy("pipeinfer", True, 2, 8), rate=0.0)  # every draft wrong
    runs = _runs(records)
    kinds, outcomes = np.array(runs["kind"]), np.array(runs["outcome"])
    assert "cancelled" in outcomes  # chained after a wrong draft, stopped on the way
    assert not (outcomes[kinds == "speculative"] == "committed").any()
    assert (np.array(runs["committed"])[kinds == "token"] == 1).all()


def test_the_report_sets_the_three_policies_side_by_side(tmp_path) -> None:
    from pathlib import Path

    from reports.build import build_report
    from workbench.cli import main
    from workbench.store.db import ResultsStore

    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "pipeinfer_sim.yaml"
    db = tmp_path / "p.duckdb"
    assert main(["run", str(scenario), "--db", str(db), "--set", "workload.num_requests=2"]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        build_report(store, None, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    table = text[text.index("## Pipeline stages") :]
    for label in ("| PipeInfer k=4 |", "| sync speculative k=4 |", "| pipeline |"):
        assert label in table
    assert "| 1.00 |" in table  # the plain pipeline against itself
