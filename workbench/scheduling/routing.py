"""Global routing: which replica gets an arriving request."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence as Seq
from typing import Protocol


class Load(Protocol):
    """What a router reads of a replica (a `BatchPolicy`, or a group of them)."""

    def outstanding(self) -> int: ...

    def queued(self) -> int: ...


class Router(ABC):
    @abstractmethod
    def pick(self, replicas: Seq[Load]) -> int:
        """Index of the replica for the next request."""


class RoundRobin(Router):
    def __init__(self) -> None:
        self._next = 0

    def pick(self, replicas: Seq[Load]) -> int:
        index = self._next % len(replicas)
        self._next += 1
        return index


class LeastOutstanding(Router):
    """The replica with the fewest queued + running requests; ties go to the lowest index."""

    def pick(self, replicas: Seq[Load]) -> int:
        counts = [r.outstanding() for r in replicas]
        return counts.index(min(counts))


class LeastWaiting(Router):
    """The replica with the fewest requests waiting for admission, running ones not counted;
    ties go to the lowest index. Vidur's `lor` router: while every queue is empty, the first
    replica takes the arrivals."""

    def pick(self, replicas: Seq[Load]) -> int:
        counts = [r.queued() for r in replicas]
        return counts.index(min(counts))


ROUTERS: dict[str, type[Router]] = {
    "round_robin": RoundRobin,
    "least_outstanding": LeastOutstanding,
    "least_waiting": LeastWaiting,
}


class _GroupLoad:
    """The load of a pipelined replica: its virtual engines together."""

    def __init__(self, engines: Seq[Load]) -> None:
        self.engines = engines

    def outstanding(self) -> int:
        return sum(e.outstanding() for e in self.engines)

    def queued(self) -> int:
        return sum(e.queued() for e in self.engines)


class VirtualEngineRouter(Router):
    """Pipeline parallelism: `replicas` lists every replica's virtual engines in turn. The
    inner router picks the replica; inside it, the engine with the fewest unfinished
    requests takes the request (vLLM's rule; ties to the first)."""

    def __init__(self, inner: Router, engines_per_replica: int) -> None:
        self.inner = inner
        self.engines = engines_per_replica

    def pick(self, replicas: Seq[Load]) -> int:
        p = self.engines
        groups = [replicas[i : i + p] for i in range(0, len(replicas), p)]
        chosen = self.inner.pick([_GroupLoad(g) for g in groups])
        loads = [e.outstanding() for e in groups[chosen]]
        return chosen * p + loads.index(min(loads))


def build_router(kind: str, engines_per_replica: int = 1) -> Router:
    """`engines_per_replica` > 1: replicas are pipelined, each with that many engines."""
    router = ROUTERS[kind]()
    return router if engines_per_replica == 1 else VirtualEngineRouter(router, engines_per_replica)
