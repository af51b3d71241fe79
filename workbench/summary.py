"""The one-screen text summary of a run, from the metrics module's keys.

The header comes from the run's main configuration values (`RunHeader`), so a run just
finished and a stored run (`workbench summary RUN`) print alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.metrics import DEFAULT_PERCENTILES, SummaryValue, percentile_name
from workbench.scenario.scenario import Scenario

_LATENCIES = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2el_ms"))


@dataclass(frozen=True)
class RunHeader:
    """What the first lines of a summary say about the run."""

    run_id: str
    scenario_name: str
    backend: str
    scheduler: str
    decoder: str
    model: str
    gpu: str
    replicas: int
    tensor_parallel: int
    cost_model: str
    label: str | None = None

    @classmethod
    def from_scenario(cls, run_id: str, scenario: Scenario, label: str | None) -> RunHeader:
        hw = scenario.hardware
        return cls(
            run_id, scenario.name, scenario.backend, scenario.scheduler.kind,
            scenario.decoder.kind, scenario.model.name, hw.gpu, hw.replicas,
            hw.tensor_parallel, scenario.cost_model.kind, label,
        )  # fmt: skip

    @classmethod
    def from_run(cls, run: dict[str, Any]) -> RunHeader:
        """From a stored run's row (`ResultsStore.get_run`)."""
        return cls(
            str(run["run_id"]), str(run["scenario_name"]), str(run["backend"]),
            str(run["scheduler"]), str(run["decoder"]), str(run.get("model") or "?"),
            str(run.get("gpu") or "?"), int(run.get("replicas") or 1),
            int(run.get("tensor_parallel") or 1), str(run.get("cost_model") or "?"),
            run.get("label"),
        )  # fmt: skip


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_summary(
    header: RunHeader,
    s: dict[str, SummaryValue],
    db: str,
    *,
    wall_s: float | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    point: str = "",
) -> str:
    """The summary block; point: the sweep point's position and values, when in a sweep."""
    h = header
    label = f" [{h.label}]" if h.label else ""
    lines = [
        f"run {h.run_id}  {h.scenario_name}{label}  ({h.backend}, {h.scheduler}, {h.decoder}, "
        f"{h.model} on {h.replicas}×{h.tensor_parallel} {h.gpu})  → {db}"
        + (f"  {point}" if point else ""),
        f"  completed {s['completed']}/{s['num_requests']} in {_fmt(s['duration'], 2)} s   "
        f"{_fmt(s['request_throughput'], 2)} req/s   {_fmt(s['output_throughput'], 0)} "
        f"output tok/s   goodput {_fmt(s.get('request_goodput'), 2)} req/s",
        *_latency_lines(s, percentiles),
        f"  mean batch {_fmt(s.get('mean_batch_size'))}   tokens/emission "
        f"{_fmt(s.get('mean_tokens_per_emission'), 2)}   preemptions {s.get('preemptions', 0)}",
    ]
    if "effective_token_ratio" in s:  # static-batch runs: the sequence-scheduling metrics
        lines.append(
            f"  effective tokens {_fmt(s['effective_token_ratio'], 3)} (paper "
            f"{_fmt(s['effective_token_ratio_paper'], 3)})   avg batch length "
            f"{_fmt(s['avg_batch_length'])}   FCR ratio {_fmt(s['fcr_ratio'], 3)}   "
            f"decode iterations {s['decode_iterations']}"
        )
    if "acceptance_rate" in s:  # the run drafted tokens: speculative / lookahead metrics
        lines.append(_drafting_line(s))
    if "apar_step_compression" in s:  # APAR's branches
        lines.append(
            f"  forks {_fmt(_percent(s['apar_fork_rate']), 0)}% of requests   branches/request "
            f"{_fmt(s['apar_branches_per_request'], 2)}   live branches/step "
            f"{_fmt(s['apar_mean_live_branches'], 2)}   step compression "
            f"{_fmt(s['apar_step_compression'], 2)}"
        )
    lines.append("  " + clock_line(h, wall_s))
    if s.get("saturated"):
        lines.append(f"  ⚠ saturated: {s['saturation']}: {SATURATION_ADVICE}")
    return "\n".join(lines)


def _drafting_line(s: dict[str, SummaryValue]) -> str:
    """Speculative / lookahead metrics (APAR runs that speculate have no per-emission ones)."""
    per_emission = "mean_tokens_per_decode_step" in s
    parts = [
        f"acceptance {_fmt(s['acceptance_rate'], 3)}",
        f"accepted/step {_fmt(s['mean_accepted_tokens'], 2)}",
    ]
    if per_emission:
        parts.insert(0, f"tokens/decode step {_fmt(s['mean_tokens_per_decode_step'], 2)}")
        parts.append(f"step compression {_fmt(s['step_compression_ratio'], 2)}")
    parts.append(f"extra FLOPs {_fmt(_percent(s['extra_flops_share']), 0)}%")
    return "  " + "   ".join(parts)


SATURATION_ADVICE = (
    "the engine did not keep up, so these latencies grow with the run's length; "
    "lower the rate or add capacity"
)


def _latency_lines(s: dict[str, SummaryValue], percentiles: tuple[float, ...]) -> list[str]:
    stats = ["mean", "median", *map(percentile_name, percentiles)]
    head = "".join(f"{name:>10}" for name in stats)
    lines = [f"  {'latency (ms)':<14}{head}{'n':>10}"]
    for label, key in _LATENCIES:
        n_key = "n_" + key.removesuffix("_ms")
        cells = "".join(f"{_fmt(s.get(f'{stat}_{key}')):>10}" for stat in stats)
        lines.append(f"  {label:<14}{cells}{s.get(n_key, 0):>10}")
    return lines


def clock_line(header: RunHeader, wall_s: float | None) -> str:
    """Which clock the times above are on, and how long the run took on the wall clock."""
    if header.backend == "sim":
        clock = f"times simulated (cost model: {header.cost_model})"
    else:
        clock = "times measured on the wall clock"
    return f"{clock}   wall time {_fmt(wall_s, 1)} s"


def _percent(share: float | None) -> float | None:
    return None if share is None else 100.0 * share
