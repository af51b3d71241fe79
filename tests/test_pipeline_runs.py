"""The rules over runs (compatibility, greedy verification, which runs to cancel), the
layer split, the emulated link and the pipeline metrics: plain functions, no processes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.metrics.pipeline import PIPELINE_SUMMARY_COLUMNS, pipeline_summary, runs_in_flight
from workbench.records import RunRecords

pytest.importorskip("torch")

from real_backend.pipeline.link import EmulatedLink
from real_backend.pipeline.runs import (
    Run,
    compatible,
    match_path,
    resolve,
    runs_to_cancel,
)
from real_backend.pipeline.stage_model import layer_ranges


def run(run_id, context, tokens, parents=None, parent_seq=None, main=None) -> Run:
    parents = list(range(-1, len(tokens) - 1)) if parents is None else parents
    main = len(tokens) if main is None else main
    return Run(run_id, 0, "speculative", context, tokens, parents, main, parent_seq, len(tokens))


# ---------------------------------------------------------------- compatibility


def test_a_run_helps_while_the_committed_tokens_follow_its_context_and_tree() -> None:
    r = run(1, [1, 2, 3], [7, 8, 9])
    assert match_path(r, [1, 2]) == []  # committed is shorter than its context: it agrees
    assert match_path(r, [1, 2, 3]) == []
    assert match_path(r, [1, 2, 3, 7, 8]) == [0, 1]
    assert match_path(r, [1, 5]) is None  # the context disagrees
    assert match_path(r, [1, 2, 3, 7, 5]) is None  # left the tree
    assert match_path(r, [1, 2, 3, 7, 8, 9, 4]) is None  # past its deepest node: stale


def test_a_tree_is_followed_along_any_branch() -> None:
    # 0:7 -> 1:8 (main), and 2:5 under 0, 3:6 under the context
    r = run(1, [1], [7, 8, 5, 6], parents=[-1, 0, 0, -1], main=2)
    assert match_path(r, [1, 7, 5]) == [0, 2]
    assert match_path(r, [1, 6]) == [3]
    assert r.main_tokens == [7, 8]


def test_greedy_verification_walks_while_choices_are_children() -> None:
    r = run(1, [1, 2], [7, 8, 9])
    # committed [1, 2, 7]: node 0 is 7; its choice 8 is node 1, whose choice 4 is no child
    resolution = resolve(r, [1, 2, 7], {0: 8, 1: 4, 2: 0})
    assert resolution.new_tokens == [8, 4]
    assert resolution.path == [0, 1]
    assert resolve(r, [1, 2], {0: 8}) is None  # committed does not reach its nodes yet
    assert resolve(r, [1, 3, 7], {0: 8}) is None


def test_every_committed_token_is_a_choice_after_the_committed_prefix() -> None:
    """Over random trees and choices: the tokens `resolve` commits are, one by one, the
    choice at the node spelling the committed prefix so far (greedy decoding's token)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 8))
        parents = [int(rng.integers(-1, i)) for i in range(n)]
        tokens = [int(t) for t in rng.integers(0, 4, n)]
        r = run(0, [9], tokens, parents)
        choices = {i: int(c) for i, c in enumerate(rng.integers(0, 4, n))}
        committed = [9, tokens[0]] if parents[0] == -1 else [9, 5]
        resolution = resolve(r, committed, choices)
        if resolution is None:
            assert not compatible(r, committed) or committed == [9]
            continue
        prefix = list(committed)
        for token in resolution.new_tokens:
            node = match_path(r, prefix)[-1]
            assert token == choices[node]
            prefix.append(token)


def test_cancelling_spares_runs_whose_kv_a_helpful_run_forks() -> None:
    stale = run(1, [1], [5], parent_seq=None)  # its choice is already committed
    child = run(2, [1, 5], [6, 7], parent_seq=1)  # forks run 1's sequence; still helps
    wrong = run(3, [1, 5, 8], [4], parent_seq=2)  # disagrees with the committed tokens
    committed = [1, 5, 6]
    assert not compatible(stale, committed) and compatible(child, committed)
    assert runs_to_cancel([stale, child, wrong], committed) == [wrong]
    assert runs_to_cancel([stale, wrong], committed) == [stale, wrong]


# ---------------------------------------------------------------- stages and links


def test_layer_ranges_are_contiguous_and_cover_every_layer() -> None:
    assert layer_ranges(8, 3, None) == [range(0, 3), range(3, 6), range(6, 8)]
    assert layer_ranges(4, 4, None) == [range(i, i + 1) for i in range(4)]
    assert layer_ranges(10, 2, [1, 4]) == [range(0, 2), range(2, 10)]
    assert layer_ranges(3, 2, [100, 1]) == [range(0, 2), range(2, 3)]  # one layer at least
    with pytest.raises(WorkbenchError, match="stage needs one"):
        layer_ranges(2, 3, None)
    with pytest.raises(WorkbenchError, match="layer_split"):
        layer_ranges(4, 2, [1, 1, 1])


def test_the_emulated_link_adds_latency_and_queues_at_its_bandwidth() -> None:
    link = EmulatedLink(latency_s=0.005, bytes_per_s=1000.0)
    assert link.delivery_time(0.0, 10) == pytest.approx(0.015)  # 10 ms on the wire + 5
    assert link.delivery_time(0.0, 10) == pytest.approx(0.025)  # waits for the first
    assert link.delivery_time(1.0, 0) == pytest.approx(1.005)
    free = EmulatedLink(latency_s=0.002, bytes_per_s=None)
    assert free.delivery_time(3.0, 10**9) == pytest.approx(3.002)


# ---------------------------------------------------------------- metrics


def _records_with_runs(columns: dict, arrival: float, finish: float) -> RunRecords:
    from workbench.recorder import Recorder

    rec = Recorder(1)
    rec.arrival_s[0], rec.first_token_s[0], rec.finish_s[0] = arrival, finish, finish
    rec.replica[0] = 0
    records = RunRecords(
        rec.request_records(np.array([3])), rec.step_records(), rec.emission_spans()
    )
    records.info["pipeline_runs"] = json.dumps(columns)
    return records


def test_pipeline_metrics_count_waste_and_runs_in_flight() -> None:
    columns = {
        "outcome": ["committed", "cancelled", "discarded", "committed"],
        "launched_s": [0.0, 1.0, 1.0, 2.0],
        "resolved_s": [2.0, 3.0, 4.0, 4.0],
        "stage_s": [[1.0, 1.0], [0.5, 0.25], [0.5, 0.5], [1.0, 1.0]],
        "stage_status": [
            ["computed", "computed"],
            ["computed", "aborted"],
            ["computed", "computed"],
            ["computed", "computed"],
        ],
    }
    summary = pipeline_summary(_records_with_runs(columns, 0.0, 4.0))
    assert set(summary) == set(PIPELINE_SUMMARY_COLUMNS)
    assert summary["pipeline_runs_launched"] == 4
    assert (summary["pipeline_runs_committed"], summary["pipeline_runs_cancelled"]) == (2, 1)
    assert summary["pipeline_runs_discarded"] == 1
    assert summary["pipeline_wasted_whole_s"] == pytest.approx(1.5)  # 0.5 + 0.5 + 0.5
    assert summary["pipeline_wasted_partial_s"] == pytest.approx(0.25)
    assert summary["pipeline_stage_busy_s"] == pytest.approx(5.75)
    # in flight: 1 on [0,1), 3 on [1,2), 3 on [2,3) (one back, one launched), 2 on [3,4)
    assert summary["pipeline_mean_runs_in_flight"] == pytest.approx((1 + 3 + 3 + 2) / 4)
    assert summary["pipeline_max_runs_in_flight"] == 3
    assert summary["pipeline_stage_utilization"] == pytest.approx(5.75 / 8)
    times, level = runs_in_flight(columns["launched_s"], columns["resolved_s"])
    assert level[-1] == 0 and times[0] == 0.0
