"""PipeInfer at the paper's scale on the simulator: the three policies over acceptance rates,
CPU or GPU nodes, slow or fast links, 4 or 8 stages (Llama-3-70B, a Llama-3.2-1B draft).

Decode speed is output tokens per second of decoding (1 / mean TPOT), prefill left out:
the paper's figure of merit is generation speed. Prints a markdown table of tokens/s and
PipeInfer's speed-up over synchronous speculative decoding and over plain pipelining.

    python benchmarks/pipeinfer_sim_sweep.py [--requests 8]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from simulator.run import simulate
from workbench.metrics import summarize
from workbench.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "pipeinfer_sim.yaml"
NODES = {  # name → overrides
    "CPU nodes": ["hardware.gpu=cpu", "cost_model={kind: roofline}"],
    "A100 nodes": ["hardware.gpu=a100-80gb", "cost_model={kind: fitted}"],
}
LINKS = {
    "1 Gbit/s": "{latency_us: 200, bandwidth_gb_s: 0.125}",
    "100 Gbit/s": "{latency_us: 5, bandwidth_gb_s: 12.5}",
}
POLICIES = {
    "pipeinfer": "{kind: pipeinfer, draft: {name: llama-3.2-1b}, max_draft_tokens: 4, "
    "max_runs_in_flight: 8, acceptance: {kind: iid, rate: RATE}}",
    "speculative": "{kind: pipeinfer, asynchronous: false, draft: {name: llama-3.2-1b}, "
    "max_draft_tokens: 4, acceptance: {kind: iid, rate: RATE}}",
    "pipeline": "{kind: pipeline}",
}


def decode_rate(overrides: list[str]) -> float:
    summary = summarize(simulate(load_scenario(SCENARIO, [*overrides, "sweep=null"])))
    return 1000.0 / summary["mean_tpot_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    print("| nodes | link | stages | acceptance | PipeInfer tok/s | sync spec. | pipeline "
          "| PipeInfer / sync | PipeInfer / pipeline |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (nodes, node_set), (link, hop), stages, rate in itertools.product(
        NODES.items(), LINKS.items(), (4, 8), (0.3, 0.5, 0.7, 0.9)
    ):
        base = [*node_set, f"hardware.stage_link={hop}", f"hardware.pipeline_parallel={stages}",
                f"workload.num_requests={args.requests}"]  # fmt: skip
        rates = {
            name: decode_rate([*base, f"decoder={policy.replace('RATE', str(rate))}"])
            for name, policy in POLICIES.items()
        }
        pi, sync, pipe = rates["pipeinfer"], rates["speculative"], rates["pipeline"]
        print(f"| {nodes} | {link} | {stages} | {rate} | {pi:.2f} | {sync:.2f} | {pipe:.2f} "
              f"| {pi / sync:.2f}× | {pi / pipe:.2f}× |")  # fmt: skip


if __name__ == "__main__":
    main()
