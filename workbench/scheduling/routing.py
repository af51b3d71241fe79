"""Global routing: which replica gets an arriving request."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence as Seq

from workbench.scheduling.policy import BatchPolicy


class Router(ABC):
    @abstractmethod
    def pick(self, replicas: Seq[BatchPolicy]) -> int:
        """Index of the replica for the next request."""


class RoundRobin(Router):
    def __init__(self) -> None:
        self._next = 0

    def pick(self, replicas: Seq[BatchPolicy]) -> int:
        index = self._next % len(replicas)
        self._next += 1
        return index


class LeastOutstanding(Router):
    """The replica with the fewest queued + running requests; ties go to the lowest index."""

    def pick(self, replicas: Seq[BatchPolicy]) -> int:
        counts = [r.outstanding() for r in replicas]
        return counts.index(min(counts))


class LeastWaiting(Router):
    """The replica with the fewest requests waiting for admission, running ones not counted;
    ties go to the lowest index. Vidur's `lor` router: while every queue is empty, the first
    replica takes the arrivals."""

    def pick(self, replicas: Seq[BatchPolicy]) -> int:
        counts = [r.queued() for r in replicas]
        return counts.index(min(counts))


ROUTERS: dict[str, type[Router]] = {
    "round_robin": RoundRobin,
    "least_outstanding": LeastOutstanding,
    "least_waiting": LeastWaiting,
}


def build_router(kind: str) -> Router:
    return ROUTERS[kind]()
