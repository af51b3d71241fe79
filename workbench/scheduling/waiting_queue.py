"""Waiting queues of continuous batching: the order in which waiting requests are admitted.

`ContinuousBatching` only appends arrivals, puts a preempted sequence back at the front,
and looks at / takes the head. FCFS is a plain deque; the length-aware queues rank waiting
requests by their predicted output length (shortest first, or by length bucket), with an
optional aging rule against starvation: a request that has waited `aging_s` goes before
every younger one, oldest first. A preempted sequence always goes first, as with FCFS:
it already holds the oldest claim, and re-ranking it could starve it.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Protocol

from workbench.scenario.admission import (
    AdmissionConfig,
    LengthBucketAdmission,
    ShortestPredictedAdmission,
)
from workbench.scheduling.sequence import Sequence


class WaitingQueue(Protocol):
    def __len__(self) -> int: ...

    def append(self, seq: Sequence) -> None:
        """A newly arrived request."""

    def appendleft(self, seq: Sequence) -> None:
        """A preempted sequence: it goes first."""

    def head(self) -> Sequence:
        """The next request to admit (the queue must not be empty)."""

    def popleft(self) -> Sequence:
        """Take the head out."""

    def set_time(self, now: float) -> None:
        """The time the next admissions happen at (aging depends on it)."""

    def head_changes_at_s(self) -> float | None:
        """When the head will change with time alone (no arrival, no admission), if ever."""


class FcfsQueue(deque[Sequence]):
    """First come, first served: vLLM's order."""

    def head(self) -> Sequence:
        return self[0]

    def set_time(self, now: float) -> None:
        pass

    def head_changes_at_s(self) -> float | None:
        return None


class RankedQueue:
    """Smallest `rank(seq)` first, ties in arrival order; aged requests before all others."""

    def __init__(self, rank: Callable[[Sequence], int], aging_s: float | None = None) -> None:
        self.rank = rank
        self.aging_s = aging_s
        self._now = float("-inf")
        self._front: deque[Sequence] = deque()  # preempted sequences, in re-queue order
        self._heap: list[tuple[int, int]] = []  # (rank, arrival number)
        self._fifo: deque[int] = deque()  # arrival numbers, oldest first (for aging)
        self._waiting: dict[int, Sequence] = {}  # arrival number → sequence still queued
        self._arrivals = 0

    def __len__(self) -> int:
        return len(self._front) + len(self._waiting)

    def append(self, seq: Sequence) -> None:
        number = self._arrivals
        self._arrivals += 1
        self._waiting[number] = seq
        heapq.heappush(self._heap, (self.rank(seq), number))
        self._fifo.append(number)

    def appendleft(self, seq: Sequence) -> None:
        self._front.appendleft(seq)

    def set_time(self, now: float) -> None:
        self._now = now

    def head(self) -> Sequence:
        if self._front:
            return self._front[0]
        return self._waiting[self._head_number()]

    def popleft(self) -> Sequence:
        if self._front:
            return self._front.popleft()
        return self._waiting.pop(self._head_number())  # heap and FIFO drop it lazily

    def head_changes_at_s(self) -> float | None:
        """The time the oldest waiting request ages past a younger head (a preempted
        sequence at the front stays the head until it is admitted)."""
        if self.aging_s is None or self._front or not self._waiting:
            return None
        oldest = self._oldest_number()
        if oldest == self._head_number():
            return None
        return self._aged_at_s(self._waiting[oldest])

    def _head_number(self) -> int:
        oldest = self._oldest_number()
        if self.aging_s is not None and self._now >= self._aged_at_s(self._waiting[oldest]):
            return oldest
        while self._heap[0][1] not in self._waiting:
            heapq.heappop(self._heap)
        return self._heap[0][1]

    def _oldest_number(self) -> int:
        while self._fifo[0] not in self._waiting:
            self._fifo.popleft()
        return self._fifo[0]

    def _aged_at_s(self, seq: Sequence) -> float:
        # One expression for the rule and for the deadline a decode span stops at, so
        # bulk and step-by-step stepping agree bit for bit.
        assert self.aging_s is not None
        return seq.arrival_s + self.aging_s


def predicted(seq: Sequence) -> int:
    if seq.predicted_tokens is None:
        raise ValueError(f"request {seq.request_id} has no predicted length")
    return seq.predicted_tokens


def build_waiting_queue(cfg: AdmissionConfig) -> WaitingQueue:
    if isinstance(cfg, ShortestPredictedAdmission):
        return RankedQueue(predicted, cfg.aging_s)
    if isinstance(cfg, LengthBucketAdmission):
        width = cfg.bucket_tokens
        return RankedQueue(lambda seq: -(-predicted(seq) // width), cfg.aging_s)
    return FcfsQueue()
