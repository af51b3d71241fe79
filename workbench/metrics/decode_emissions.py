"""Decode emissions, one per sequence and decode step, read off the emission spans.

A span of n steps emitting t tokens each holds n emissions of t tokens; a multi-token
decoder writes each burst as its own one-step span. The first emission after a prefill
(a request's first span, or one that does not continue the previous span on the next step
of the same replica, as after a recompute preemption) is the prefill's, not a decode's.
A decode emission's *room* is how many tokens beyond its first it could have emitted:
the request's output tokens not yet emitted, less one. A decoder with K tokens of headroom
(k drafts) is capped by the output length exactly when the room is below K, so keeping only
emissions with room ≥ K gives the uncapped distribution. Never expanded per emission.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.records import RunRecords


@dataclass(frozen=True)
class DecodeEmissions:
    """Per span (completed requests only): its decode emissions and their room."""

    request_row: np.ndarray  # (e,) int64: row in records.requests
    tokens: np.ndarray  # (e,) int64: tokens per emission
    count: np.ndarray  # (e,) int64: decode emissions in the span
    emitted_before: np.ndarray  # (e,) int64: request tokens before its first decode emission
    output_tokens: np.ndarray  # (e,) int64: the request's output tokens
    after_prefill: np.ndarray  # (e,) bool: the span opens with a prefill's emission
    replica: np.ndarray  # (e,) int64: the replica whose steps made the span
    first_step: np.ndarray  # (e,) int64: the replica's step of the span's first decode emission

    def with_room(self, room: int) -> np.ndarray:
        """(e,) emissions of each span whose room was at least `room`."""
        return self.at_positions(room, 0, np.iinfo(np.int64).max)

    def histogram(self, room: int = 0) -> np.ndarray:
        """Decode emissions by tokens emitted (index = tokens), those with room ≥ `room`."""
        return self.histogram_at_positions(room, 0, np.iinfo(np.int64).max)

    def at_positions(self, room: int, low: int, high: int) -> np.ndarray:
        """(e,) emissions of each span with room ≥ `room` made when the request had emitted
        `low` to `high` − 1 tokens (a span's j-th emission comes after emitted_before + j ·
        tokens of them)."""
        first_j, last_j = self._emissions_between(room, low, high)
        return np.maximum(last_j - first_j + 1, 0)

    def at_positions_on_steps(self, room: int, low: int, high: int, parity: int) -> np.ndarray:
        """`at_positions(room, low, high)` of those made on a step of the replica whose number
        has the given parity (0 even, 1 odd): every other emission of a sequence."""
        first_j, last_j = self._emissions_between(room, low, high)
        first, last = self.first_step + first_j, self.first_step + last_j  # (e,) their steps
        of_parity = (last - parity) // 2 - (first - 1 - parity) // 2  # (e,) in [first, last]
        return np.where(last_j >= first_j, of_parity, 0)

    def _emissions_between(self, room: int, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
        """(first j, last j), each (e,): the span's emissions `at_positions` counts (none
        where last < first)."""
        last = np.minimum(self.output_tokens - 1 - room, high - 1)  # (e,) latest position kept
        before, tokens = self.emitted_before, self.tokens
        first_j = np.maximum(-np.floor_divide(before - low, tokens), 0)  # (e,) ⌈(low − eb) / t⌉
        last_j = np.minimum(np.floor_divide(last - before, tokens), self.count - 1)  # (e,)
        return first_j, last_j

    def histogram_at_positions(self, room: int, low: int, high: int) -> np.ndarray:
        """`histogram(room)` of the emissions `at_positions(room, low, high)`."""
        counts = self.at_positions(room, low, high)  # (e,)
        return np.bincount(self.tokens, weights=counts).astype(np.int64)


def decode_emissions(records: RunRecords) -> DecodeEmissions:
    """The decode emissions of completed requests (spans in request, then step order)."""
    spans = records.emissions
    ids = np.asarray(records.requests.request_id, dtype=np.int64)
    request = np.asarray(spans.request_id, dtype=np.int64)
    order = np.lexsort((spans.first_step, request))
    request, tokens = request[order], np.asarray(spans.tokens_per_step, dtype=np.int64)[order]
    replica = np.asarray(spans.replica, dtype=np.int64)[order]
    first, last = spans.first_step[order], spans.last_step[order]
    by_id = np.argsort(ids, kind="stable")
    rows = by_id[np.searchsorted(ids, request, sorter=by_id)]  # (e,) request rows
    done = (np.asarray(records.requests.status) == "finished")[rows]
    new_request = np.r_[True, request[1:] != request[:-1]]  # (e,)
    continues = ~new_request & (first == np.r_[-2, last[:-1]] + 1)
    continues &= replica == np.r_[-1, replica[:-1]]
    after_prefill = (~continues).astype(np.int64)  # the span opens with a prefill emission
    emitted = (last - first + 1) * tokens  # (e,)
    before = np.cumsum(emitted) - emitted  # tokens of all earlier spans...
    before -= np.maximum.accumulate(np.where(new_request, before, 0))  # ...of this request
    output = np.asarray(records.requests.output_tokens, dtype=np.int64)[rows]
    keep = done & (tokens > 0)
    return DecodeEmissions(
        request_row=rows[keep],
        tokens=tokens[keep],
        count=(last - first + 1 - after_prefill)[keep],
        emitted_before=(before + after_prefill * tokens)[keep],
        output_tokens=output[keep],
        after_prefill=after_prefill[keep].astype(bool),
        replica=replica[keep],
        first_step=(first + after_prefill)[keep],
    )
