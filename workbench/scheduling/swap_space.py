"""A request swapped out to host memory, as continuous batching keeps it (APAR).

vLLM swaps a preempted group of several running sequences to CPU memory instead of
recomputing it; APAR's released server relies on that for requests with live branches.
The policy counts host memory in KV blocks (`ContinuousBatching.swap_blocks`); the engine
moves the cache tables themselves (`SwapMove`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from workbench.scheduling.plan import SwapMove
from workbench.scheduling.sequence import Sequence


@dataclass(frozen=True)
class SwappedRequest:
    owner: int  # the request
    running: list[Sequence]  # its branches that were decoding, in admission order
    forks: list[Sequence]  # its forks that waited for admission, oldest first
    held: dict[int, int]  # its ended branches still holding blocks → those blocks

    @classmethod
    def of(
        cls, owner: int, running: list[Sequence], forks: list[Sequence], held: dict[int, int]
    ) -> SwappedRequest:
        return cls(owner, list(running), list(forks), dict(held))

    @property
    def blocks(self) -> int:
        """Blocks it holds: its running branches' (exact once out of the decode set) and its
        ended branches'."""
        return sum(s.blocks for s in self.running) + sum(self.held.values())

    def move(self) -> SwapMove:
        branches = (*(s.request_id for s in self.running), *self.held)
        return SwapMove(self.owner, branches, self.blocks)


@runtime_checkable
class SwapCounting(Protocol):
    def swap_counts(self) -> dict[str, int]: ...


def swap_info(policies: Iterable[object]) -> dict[str, str]:
    """How APAR's preemptions went to host memory, summed over the engines that swap, for a
    run's info: requests swapped out, refused for a full host memory, recomputed after all."""
    counts = [p.swap_counts() for p in policies if isinstance(p, SwapCounting)]
    keys = counts[0] if counts else {}
    return {f"apar_{key}": str(sum(c[key] for c in counts)) for key in keys}
