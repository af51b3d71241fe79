"""The simulator beside Microsoft Vidur on Vidur's own runs (data/peer_runs/vidur), replaying
Vidur's exact request stream so only the simulators differ (issue 17's targets: medians of
TTFT, TPOT and E2E within 15 %, throughput within 5 %, the same restarts regime: none where
Vidur has none, within a factor of 3 where it has some)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.run import simulate
from workbench.peer_runs import (
    compare,
    load_vidur_runs,
    vidur_figures,
    vidur_metrics,
    vidur_replay,
    vidur_request_stream,
)
from workbench.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "data" / "traces" / "splitwise_conv.csv"
RUNS = load_vidur_runs(ROOT / "data" / "peer_runs" / "vidur" / "runs.json")
CASES = {
    "q05_tok": "A70b_q05_tok",
    "q1_10k": "A70b_10k_noplots",
    "4rep_lor": "A70b_4rep_lor",
    "tp2pp2": "A70b_tp2pp2",
}


def test_vidurs_stream_has_its_offered_rate_and_clipped_lengths() -> None:
    arrival, prompt, output = vidur_request_stream(TRACE, 10_000, 1.0, 4096)
    assert (prompt + output).max() <= 4096 and prompt.min() >= 1 and output.min() >= 1
    assert np.diff(arrival).max() <= 3.0  # gaps capped at 3 mean gaps
    # Vidur's printed throughput of this run is 1.0523 req/s: its stream offers that rate.
    assert 10_000 / arrival[-1] == pytest.approx(1.0523, rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_the_simulator_agrees_with_vidur(name: str, tmp_path: Path) -> None:
    path = ROOT / "scenarios" / "vidur" / f"{name}.yaml"
    replay = vidur_replay(load_scenario(path), TRACE, tmp_path, max_tokens=4096)
    ours = vidur_metrics(simulate(load_scenario(path, replay)))
    rows = {r.metric: r for r in compare(ours, vidur_figures(RUNS[CASES[name]]))}
    for metric in ("ttft_s.p50", "tpot_ms.p50", "e2e_s.p50"):
        assert abs(rows[metric].difference) < 0.15, rows[metric]
    assert abs(rows["throughput_req_per_s"].difference) < 0.05
    theirs_restarts, our_restarts = rows["restarts_total"].theirs, rows["restarts_total"].ours
    assert (theirs_restarts == 0) == (our_restarts == 0)
    if theirs_restarts:  # a threshold effect: our own streams give 11, 12, 11 here
        assert 1 / 3 <= our_restarts / theirs_restarts <= 3
