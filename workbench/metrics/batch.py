"""Metrics of static-batch runs (static batching, sequence scheduling): how many of the
computed token slots were useful, counted as the sequence-scheduling paper counts them and
honestly. Computed from the records alone, like every metric (`workbench.metrics`).

A static batch shows in the step records as one prefill step over all its slots followed
by decode steps of the same slots, each step computing one token per slot (padding
included). So on each replica a batch runs from a prefill step to the next one; its length
is its number of steps, its slots the prefill step's batch size.

- effective_token_ratio: useful tokens (output tokens of completed requests) over every
  computed token slot, Σ over steps of the batch size: padding and the wasted first
  attempts of FCR failures count as computed.
- effective_token_ratio_paper: the paper's count (`src/benchmark.py`), over the length of
  each completed request's *final* batch (a recomputed failure's first attempt is
  dropped; a request cut at a cap counts what it generated there).
- avg_batch_length: the paper's average length: mean over completed requests of their
  final batch's length in steps, padding included.
- fcr_ratio: FCR failures (restarts) per request, the paper's failure ratio (each failure
  counted once: it is recomputed once); decode_iterations: engine steps (forward passes,
  prefill steps included), summed over replicas.

Two of the paper's conventions are left out: its `length` of a request is its final
batch's iterations + 1, and its token count re-tokenizes the output with a BOS, so a row
cut at the cap counts one token more than it generated (docs/seqsched.md gives the
figures both ways; the + 1 moves avg_batch_length by 1 and the ratios by under 1%).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.records import RunRecords

STATIC_BATCH_SCHEDULERS = frozenset({"static", "sequence_scheduling"})
BATCH_METRICS = (
    "effective_token_ratio",
    "effective_token_ratio_paper",
    "avg_batch_length",
    "fcr_ratio",
    "decode_iterations",
)


@dataclass(frozen=True)
class Batches:
    """The run's batches in (replica, step) order, and where each request ended."""

    replica: np.ndarray  # (b,) int
    first_step: np.ndarray  # (b,) int64: the batch's prefill step
    length: np.ndarray  # (b,) int64: steps the batch ran
    slots: np.ndarray  # (b,) int64: members, padding slots included
    useful_tokens: np.ndarray  # (b,) int64: output tokens of completed requests ending in it
    final_batch: np.ndarray  # (n,) int64: batch of each request's last emission (-1: none)


def find_batches(records: RunRecords) -> Batches:
    steps = records.steps
    replica = np.asarray(steps.replica, dtype=np.int64)
    order = np.lexsort((steps.step, replica))  # already sorted as recorded; made sure
    replica, step = replica[order], np.asarray(steps.step, dtype=np.int64)[order]
    starts = np.asarray(steps.prefill_tokens)[order] > 0  # (s,)
    starts[np.r_[0, np.flatnonzero(np.diff(replica)) + 1][: len(starts)]] = True
    batch_of_row = np.cumsum(starts) - 1  # (s,)
    first_row = np.flatnonzero(starts)  # (b,)
    final = _final_batch(records, replica, step, batch_of_row)  # (n,)
    done = np.asarray(records.requests.status) == "finished"
    output = np.asarray(records.requests.output_tokens, dtype=np.int64)
    kept = done & (final >= 0)
    useful = np.bincount(final[kept], weights=output[kept], minlength=len(first_row))
    return Batches(
        replica=replica[first_row],
        first_step=step[first_row],
        length=np.bincount(batch_of_row, minlength=len(first_row)).astype(np.int64),
        slots=np.asarray(steps.batch_size, dtype=np.int64)[order][first_row],
        useful_tokens=useful.astype(np.int64),
        final_batch=final,
    )


def _final_batch(
    records: RunRecords, replica: np.ndarray, step: np.ndarray, batch_of_row: np.ndarray
) -> np.ndarray:
    """Batch of each request's last emission span (rows sorted by replica, then step)."""
    ids = np.asarray(records.requests.request_id, dtype=np.int64)
    final = np.full(len(ids), -1, dtype=np.int64)
    spans = records.emissions
    if len(spans.request_id) == 0 or len(step) == 0:
        return final
    request = np.asarray(spans.request_id, dtype=np.int64)
    in_time = np.lexsort((spans.first_step, request))  # each request's spans in time order
    last = in_time[np.r_[request[in_time][1:] != request[in_time][:-1], True]]  # (n',)
    width = int(step.max()) + 1  # (replica, step) → one sortable key
    span_key = np.asarray(spans.replica, dtype=np.int64)[last] * width + spans.first_step[last]
    row = np.searchsorted(replica * width + step, span_key)  # (n',)
    by_id = np.argsort(ids)
    final[by_id[np.searchsorted(ids, request[last], sorter=by_id)]] = batch_of_row[row]
    return final


def batch_summary(records: RunRecords) -> dict[str, float | int | None]:
    """The paper's metrics of a static-batch run (see the module docstring)."""
    batches = find_batches(records)
    done = np.asarray(records.requests.status) == "finished"
    useful = int(np.asarray(records.requests.output_tokens, dtype=np.int64)[done].sum())
    computed = int(np.asarray(records.steps.batch_size, dtype=np.int64).sum())
    final = batches.final_batch[done & (batches.final_batch >= 0)]
    paper = int(batches.length[final].sum())
    n = len(done)
    return {
        "effective_token_ratio": useful / computed if computed else None,
        "effective_token_ratio_paper": useful / paper if paper else None,
        "avg_batch_length": paper / len(final) if len(final) else None,
        "fcr_ratio": float(np.asarray(records.requests.preemptions).sum()) / n if n else None,
        "decode_iterations": len(records.steps.step),
    }
