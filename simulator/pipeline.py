"""Pipeline parallelism: a replica's layers in P stages, micro-batches in flight.

As vLLM does it (V0's virtual engines): a pipeline-parallel replica runs P independent
schedulers, each with its own requests and 1/P of the KV blocks, whose steps flow through
the same P stages. A virtual engine plans its next step when its previous one has left the
last stage (it needs the sampled tokens); meanwhile the others' steps keep the stages busy.
Each stage computes its share of the layers of a step; between stages the step's hidden
states cross a link. A stage serves steps in the order they reach it (first come, first
served), one at a time.

A step entering at `t` with per-stage compute `c` and per-hop transfer `h` leaves at

    start_0 = max(t, free_0);           end_s = start_s + c
    start_s = max(end_{s-1} + h, free_s)

which `StagePipeline.run` computes, reserving each stage until the step's `end_s`. Steps
reach the pipeline in time order (each virtual engine plans at its previous step's end, and
the simulator processes events in time order), so the reservations are the real FCFS order.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.catalogs.hardware import GPUSpec
from simulator.catalogs.models import ModelSpec, dtype_bytes
from workbench.scenario.system import StageLinkConfig


@dataclass(frozen=True)
class StageLink:
    """The hop between consecutive stages: a fixed latency plus bytes over a bandwidth."""

    latency_s: float
    bandwidth_bytes_s: float

    def transfer_s(self, num_bytes: float) -> float:
        return self.latency_s + num_bytes / self.bandwidth_bytes_s


class StagePipeline:
    """The P stages of one replica: when each is next free."""

    def __init__(self, stages: int, link: StageLink, activation_bytes_per_token: int) -> None:
        self.stages = stages
        self.link = link
        self.activation_bytes_per_token = activation_bytes_per_token
        self.free_s = [0.0] * stages

    def run(self, entry_s: float, step_s: float, tokens: int) -> float:
        """Reserve the stages for one step of `tokens` tokens whose whole-model compute is
        `step_s`; returns when it leaves the last stage."""
        compute_s = step_s / self.stages  # layers split evenly
        hop_s = self.link.transfer_s(tokens * self.activation_bytes_per_token)
        ready_s = entry_s
        for stage in range(self.stages):
            start_s = max(ready_s, self.free_s[stage])
            end_s = start_s + compute_s
            self.free_s[stage] = end_s
            ready_s = end_s + hop_s
        return end_s


def stage_pipeline(
    model: ModelSpec, gpu: GPUSpec, stages: int, dtype: str, link: StageLinkConfig | None
) -> StagePipeline:
    """The pipeline of a replica of `stages` stages on `gpu`; without a `link` the stages hand
    hidden states over the GPUs' interconnect, at its latency (one node)."""
    if link is None:
        hop = StageLink(gpu.collective_latency_s, gpu.interconnect_bandwidth_bytes_s)
    else:
        hop = StageLink(link.latency_us * 1e-6, link.bandwidth_gb_s * 1e9)
    return StagePipeline(stages, hop, model.hidden_size * dtype_bytes(dtype))
