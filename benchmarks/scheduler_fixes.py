"""Figures of the three scheduler fixes of issue 21, for docs/fidelity.md.

Runs on any commit (it uses the public simulate API only), so the same command at the
commit before the fixes gives the "before" rows:

    python benchmarks/scheduler_fixes.py
    git worktree add /tmp/before 3f0bace && (cd /tmp/before && PYTHONPATH=. python \
        /path/to/benchmarks/scheduler_fixes.py)
"""

from __future__ import annotations

from pathlib import Path

from simulator.run import simulate
from workbench.metrics import summarize
from workbench.scenario.loader import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def aging_divergence() -> str:
    """Requests whose first-token or finish time differs between bulk and step-by-step."""
    overrides = [
        "workload.num_requests=1000",
        "workload.arrival.rate_per_s=12",
        "scheduler.admission={kind: shortest_predicted, aging_s: 2.0}",
        "scheduler.kv_cache.num_blocks=3000",
    ]
    bulk = load_scenario(SCENARIOS / "quickstart.yaml", overrides)
    stepped = bulk.model_copy(
        update={"simulator": bulk.simulator.model_copy(update={"bulk_steps": False})}
    )
    a, b = simulate(bulk).requests, simulate(stepped).requests
    differ = (a.first_token_s != b.first_token_s) | (a.finish_s != b.finish_s)
    return f"aging: {int(differ.sum())} of {len(differ)} requests differ, bulk vs step-by-step"


def thrash() -> str:
    records = simulate(load_scenario(SCENARIOS / "fidelity" / "preemption_thrash.yaml"))
    m = summarize(records)
    return (
        f"thrash: preemptions {records.requests.preemptions.sum()}, prefilled tokens "
        f"{records.steps.prefill_tokens.sum()} for {records.requests.prompt_tokens.sum()} "
        f"prompt tokens, TTFT mean {m['mean_ttft_ms'] / 1e3:.1f} s p50 "
        f"{m['median_ttft_ms'] / 1e3:.1f} s, E2E mean {m['mean_e2el_ms'] / 1e3:.1f} s"
    )


if __name__ == "__main__":
    print(aging_divergence())
    print(thrash())
