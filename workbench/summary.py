"""The one-screen text summary of a run, from the metrics module's keys."""

from __future__ import annotations

from typing import Any

from workbench.scenario.scenario import Scenario

_LATENCIES = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2el_ms"))


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_summary(run_id: str | None, scenario: Scenario, s: dict[str, Any], db: str) -> str:
    hw = scenario.hardware
    lines = [
        f"run {run_id}  {scenario.name}  ({scenario.backend}, {scenario.scheduler.kind}, "
        f"{scenario.decoder.kind}, {scenario.model.name} on {hw.replicas}×{hw.tensor_parallel}"
        f" {hw.gpu})  → {db}",
        f"  completed {s['completed']}/{s['num_requests']} in {_fmt(s['duration'], 2)} s   "
        f"{_fmt(s['request_throughput'], 2)} req/s   {_fmt(s['output_throughput'], 0)} "
        f"output tok/s   goodput {_fmt(s.get('request_goodput'), 2)} req/s",
        f"  {'latency (ms)':<14}{'mean':>10}{'median':>10}{'p90':>10}{'p99':>10}{'n':>10}",
    ]
    for label, key in _LATENCIES:
        n_key = "n_" + key.removesuffix("_ms")
        lines.append(
            f"  {label:<14}"
            + "".join(f"{_fmt(s.get(f'{p}_{key}')):>10}" for p in ("mean", "median", "p90", "p99"))
            + f"{s.get(n_key, 0):>10}"
        )
    lines.append(
        f"  mean batch {_fmt(s.get('mean_batch_size'))}   tokens/emission "
        f"{_fmt(s.get('mean_tokens_per_emission'), 2)}   preemptions {s.get('preemptions', 0)}"
    )
    if "effective_token_ratio" in s:  # static-batch runs: the sequence-scheduling metrics
        lines.append(
            f"  effective tokens {_fmt(s['effective_token_ratio'], 3)} (paper "
            f"{_fmt(s['effective_token_ratio_paper'], 3)})   avg batch length "
            f"{_fmt(s['avg_batch_length'])}   FCR ratio {_fmt(s['fcr_ratio'], 3)}   "
            f"decode iterations {s['decode_iterations']}"
        )
    if "acceptance_rate" in s:  # the run drafted tokens: speculative / lookahead metrics
        lines.append(
            f"  tokens/decode step {_fmt(s['mean_tokens_per_decode_step'], 2)}   acceptance "
            f"{_fmt(s['acceptance_rate'], 3)}   accepted/step {_fmt(s['mean_accepted_tokens'], 2)}"
            f"   step compression {_fmt(s['step_compression_ratio'], 2)}   extra FLOPs "
            f"{_fmt(_percent(s['extra_flops_share']), 0)}%"
        )
    return "\n".join(lines)


def _percent(share: float | None) -> float | None:
    return None if share is None else 100.0 * share
