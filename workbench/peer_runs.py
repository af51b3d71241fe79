"""Peer tools' runs of the same work, their request streams, and our records measured
under their definitions.

Vidur's runs (`data/peer_runs/vidur/runs.json`) print percentiles of its own metrics. To
compare like with like, `vidur_metrics(records)` computes those from our records:
TTFT is arrival to the end of prefill (our first token, the same instant), TPOT is the time
from the end of prefill to completion divided by the output tokens (ours divides by the
output tokens − 1), E2E arrival to completion; throughput is completed requests over the
run's span, restarts are preemptions, and the mean batch size is over steps.

`vidur_request_stream` rebuilds the requests Vidur itself sends for a trace, rate and
count (its algorithm, written here from its documented behaviour): rows clipped to
`max_tokens` proportionally, shuffled by `numpy.random.RandomState(seed).permutation`
(pandas' `sample(frac=1, random_state=seed)`), Poisson gaps `-log(1 - u) / rate` capped at
3 mean gaps from Python's `random.Random(seed)` (Vidur's `set_seeds`), one gap before each
request. Replaying it leaves only the simulators' own differences.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.errors import WorkbenchError
from workbench.metrics import request_metrics, summarize
from workbench.records import RunRecords
from workbench.scenario.scenario import Scenario
from workbench.workload.generate import fit_total
from workbench.workload.traces import read_lengths

VIDUR_KEYS = {
    "ttft_s": "TTFT_s (prefill_e2e_time)",
    "tpot_ms": "TPOT_ms (decode_time_execution_plus_preemption_normalized)",
    "e2e_s": "E2E_s (request_e2e_time)",
}
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
VIDUR_SEED = 42  # Vidur's default request-generator seed
VIDUR_MAX_GAP_MEAN_GAPS = 3.0


@dataclass(frozen=True)
class Agreement:
    """One metric of ours beside the peer's: relative difference (ours − theirs) / theirs."""

    metric: str
    ours: float
    theirs: float

    @property
    def difference(self) -> float:
        return (self.ours - self.theirs) / self.theirs if self.theirs else float("nan")


def load_vidur_runs(path: Path) -> dict[str, dict]:
    """Vidur's runs by key: `{setting, metrics}` each."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkbenchError(f"{path}: cannot read Vidur's runs ({exc})") from None


def vidur_metrics(records: RunRecords) -> dict[str, float]:
    """Our run under Vidur's metric definitions, keyed like `compare` expects."""
    per_request = request_metrics(records)
    done = per_request["finished"]
    decode_s = per_request["e2e_s"] - per_request["ttft_s"]
    samples = {
        "ttft_s": per_request["ttft_s"][done],
        "tpot_ms": 1e3 * decode_s[done] / per_request["output_tokens"][done],
        "e2e_s": per_request["e2e_s"][done],
    }
    out = {
        f"{metric}.{name}": float(np.quantile(values, q))
        for metric, values in samples.items()
        for name, q in PERCENTILES.items()
    }
    summary = summarize(records)
    out["throughput_req_per_s"] = float(summary["request_throughput"] or 0.0)
    out["restarts_total"] = float(summary["preemptions"])
    out["batch_size_mean"] = float(summary["mean_batch_size"] or 0.0)
    return out


def vidur_figures(run: dict) -> dict[str, float]:
    """A Vidur run's printed metrics under the same keys as `vidur_metrics`."""
    metrics = run["metrics"]
    out = {
        f"{metric}.{name}": float(metrics[key][name])
        for metric, key in VIDUR_KEYS.items()
        for name in PERCENTILES
    }
    for key in ("throughput_req_per_s", "restarts_total", "batch_size_mean"):
        out[key] = float(metrics[key])
    return out


def compare(ours: dict[str, float], theirs: dict[str, float]) -> list[Agreement]:
    return [Agreement(metric, ours[metric], theirs[metric]) for metric in theirs]


def vidur_request_stream(
    trace: Path, n: int, rate_per_s: float, max_tokens: int, seed: int = VIDUR_SEED
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times, prompt and output tokens of the `n` requests Vidur sends. # 3 × (n,)"""
    prompt, output = fit_total(
        read_lengths(trace, "num_prefill_tokens"),
        read_lengths(trace, "num_decode_tokens"),
        max_tokens,
        "proportional",
    )
    rows = np.random.RandomState(seed).permutation(len(prompt))[:n]  # (n,)
    draws = random.Random(seed)
    cap_s = VIDUR_MAX_GAP_MEAN_GAPS / rate_per_s
    gaps = [min(-math.log(1.0 - draws.random()) / rate_per_s, cap_s) for _ in range(n)]
    return np.cumsum(gaps), prompt[rows], output[rows]


def write_trace(path: Path, arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> None:
    """A trace CSV (`arrived_at, num_prefill_tokens, num_decode_tokens`) a scenario replays."""
    lines = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    lines += [
        f"{t!r},{p},{o}"
        for t, p, o in zip(arrival_s.tolist(), prompt.tolist(), output.tolist(), strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")


def vidur_replay(scenario: Scenario, trace: Path, folder: Path, max_tokens: int) -> list[str]:
    """Overrides that make `scenario` replay Vidur's own request stream for its rate and
    count (written to `folder/vidur_stream.csv`)."""
    rate = getattr(scenario.workload.arrival, "rate_per_s", None)
    if rate is None:
        raise WorkbenchError("Vidur's stream needs a Poisson rate", field="workload.arrival")
    stream = folder / "vidur_stream.csv"
    requests = scenario.workload.num_requests
    write_trace(stream, *vidur_request_stream(trace, requests, rate, max_tokens))
    return [
        f"workload.arrival={{kind: trace, path: {stream}}}",
        f"workload.lengths_from_trace={{path: {stream}}}",
    ]
