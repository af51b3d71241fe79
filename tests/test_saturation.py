"""Saturation: a run offered more than it serves is flagged from its records alone, in the
summary, its JSON and the database."""

from __future__ import annotations

import numpy as np
import pytest
from scenario_helpers import SCENARIOS

from workbench.metrics.saturation import detect_saturation
from workbench.records import RequestRecords
from workbench.runner import run_scenario
from workbench.scenario.loader import load_scenario
from workbench.store import ResultsStore
from workbench.summary import RunHeader, format_summary

VIDUR = SCENARIOS / "vidur_llama2_70b_tp2_a100.yaml"
# The shipped Vidur scenario as it was before the fidelity fixes (its workload, vLLM-style
# sizing and per-chunk prompt blocks), and the 2,397 KV blocks that version's KV sizing
# gave: on today's code it serves 0.93 req/s of 1.05 offered (TTFT p50 23 s, 653
# preemptions), exactly what the committed code gives on the committed scenario file (the
# issue's 0.89 req/s, 54 s and 953 preemptions came from an older version). Today's sizing
# of that file (2,745 blocks) keeps up: 1.03 req/s, TTFT p50 0.6 s, 37 preemptions.
VIDUR_BEFORE_FIXES = [
    "workload.arrival.max_gap_mean_gaps=null",
    "workload.lengths_from_trace.order=sequential",
    "workload.lengths_from_trace.max_prompt_tokens=4096",
    "workload.lengths_from_trace.max_total_tokens=null",
    "workload.lengths_from_trace.over_total=clip_prompt",
    "scheduler.prompt_blocks=per_chunk",
    "scheduler.kv_cache.sizing=vllm",
    "scheduler.kv_cache.max_request_tokens=null",
    "scheduler.kv_cache.num_blocks=2397",
]


def _run(path, overrides: list[str]) -> tuple[str, dict]:
    scenario = load_scenario(path, overrides)
    with ResultsStore.open(":memory:") as store:
        (outcome,) = run_scenario(scenario, store, source=str(path))
        stored = store.connection.execute(
            "SELECT saturated, saturation FROM run_summaries WHERE run_id = ?", [outcome.run_id]
        ).fetchall()[0]
    assert stored == (outcome.summary["saturated"], outcome.summary["saturation"])
    header = RunHeader.from_scenario(outcome.run_id, scenario, None)
    return format_summary(header, outcome.summary, ":memory:"), outcome.summary


@pytest.mark.slow
def test_the_vidur_scenario_before_the_fixes_is_saturated() -> None:
    text, summary = _run(VIDUR, VIDUR_BEFORE_FIXES)
    assert summary["saturated"] is True
    # Measured today: "served 0.877 of 1.05 req/s offered over the second half of the
    # arrivals (84%); waiting queue grew from 10 to 84 requests by the last arrivals; 653
    # preemptions (0.65 per request)": all three signs.
    reasons = summary["saturation"].split("; ")
    assert [reason.split()[0] for reason in reasons] == [
        "served",
        "waiting",
        str(summary["preemptions"]),
    ]
    assert summary["request_throughput"] < 0.95 * summary["offered_request_rate"]
    (warning,) = [line for line in text.splitlines() if "saturated" in line]
    assert warning.startswith("  ⚠ saturated: served")


@pytest.mark.slow
def test_the_vidur_scenario_as_shipped_and_the_quickstart_are_not() -> None:
    for path in (VIDUR, SCENARIOS / "quickstart.yaml"):
        text, summary = _run(path, [])
        assert summary["saturated"] is False and summary["saturation"] == "", path
        assert "saturated" not in text


def test_quickstart_far_over_capacity_is_saturated() -> None:
    quickstart = SCENARIOS / "quickstart.yaml"
    _, summary = _run(quickstart, ["workload.num_requests=1200", "workload.arrival.rate_per_s=40"])
    assert summary["saturated"] is True
    assert "waiting queue grew" in summary["saturation"]


# ---------------------------------------------------------------------- the rules


def _requests(arrival: np.ndarray, first: np.ndarray, preemptions: int = 0) -> RequestRecords:
    n = len(arrival)
    finish = first + 1.0
    return RequestRecords(
        request_id=np.arange(n),
        replica=np.zeros(n, dtype=np.int32),
        arrival_s=arrival,
        first_token_s=first,
        finish_s=finish,
        prompt_tokens=np.full(n, 10),
        output_tokens=np.full(n, 5),
        preemptions=np.full(n, preemptions, dtype=np.int32),
        status=np.array(["finished"] * n, dtype=object),
    )


def test_a_steady_queue_is_not_saturation() -> None:
    arrival = np.arange(400) / 10.0  # 10 req/s
    verdict = detect_saturation(_requests(arrival, arrival + 0.5))  # every wait 0.5 s
    assert verdict.reasons == [] and verdict.offered_request_rate == pytest.approx(10.0)


def test_a_server_slower_than_arrivals_is_saturation() -> None:
    arrival = np.arange(400) / 10.0  # 10 req/s offered, 8 req/s served
    first = np.arange(400) / 8.0 + 0.1
    verdict = detect_saturation(_requests(arrival, first))
    assert verdict.saturated
    assert any(reason.startswith("waiting queue grew") for reason in verdict.reasons)
    assert any(reason.startswith("served 8") for reason in verdict.reasons)


def test_closed_loop_runs_are_judged_on_preemptions_only() -> None:
    arrival = np.full(50, np.nan)
    first = np.arange(50, dtype=float)
    assert not detect_saturation(_requests(arrival, first)).saturated
    storm = detect_saturation(_requests(arrival, first, preemptions=1))
    assert storm.reasons == ["50 preemptions (1.00 per request)"]
    assert storm.offered_request_rate is None
