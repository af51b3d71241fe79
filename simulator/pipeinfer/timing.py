"""How long a pipeline takes: each stage's compute for a run, the links, the head's drafts.

A run (a micro-batch of `nodes` new tokens after `context` cached ones) costs each stage its
share of the layers; the hidden states of its nodes cross a link between stages; the last
stage's choices come back to the head over one more hop. The head (stage 0) also drafts,
one draft forward per drafted token. All in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class StageCost(Protocol):
    def __call__(self, stage: int, nodes: int, context: int) -> float:
        """Seconds stage `stage` computes a run of `nodes` tokens after `context` ones."""


class DraftCost(Protocol):
    def __call__(self, context: int) -> float:
        """Seconds of one draft forward after `context` tokens (one drafted token)."""


@dataclass(frozen=True)
class Link:
    latency_s: float
    bandwidth_bytes_s: float | None  # None: unlimited

    def transfer_s(self, num_bytes: float) -> float:
        if self.bandwidth_bytes_s is None:
            return self.latency_s
        return self.latency_s + num_bytes / self.bandwidth_bytes_s


@dataclass(frozen=True)
class PipelineTiming:
    stages: int
    layers: tuple[int, ...]  # layers of each stage (cancellation is checked between them)
    stage_cost: StageCost
    draft_cost: DraftCost
    link: Link
    activation_bytes_per_token: int  # hidden state of one token between stages
    commit_s: float = 0.0  # the head's work between a commit and its next launch

    def hop_s(self, nodes: int) -> float:
        return self.link.transfer_s(nodes * self.activation_bytes_per_token)

    def return_s(self) -> float:
        """The last stage's choices back to the head: a few bytes per node."""
        return self.link.latency_s


def even_layers(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per stage, as even as possible, extra layers to the first stages."""
    base, extra = divmod(num_layers, stages)
    return tuple(base + (1 if s < extra else 0) for s in range(stages))
