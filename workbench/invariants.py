"""Invariants every run's records must satisfy, whatever the backend, policy or decoder.

`violations(records, kv_blocks)` lists what a run breaks (empty: nothing): tokens conserved
(a request's emissions add up to its output tokens and to the steps' emitted tokens), KV
within the replica's blocks, time ordered (steps of a replica back to back, arrival ≤
first token ≤ finish, emissions inside that window), and step counts coherent (decodes
within the batch, accepted ≤ drafted, verified ≥ decodes, draft time within the step).
Tests run it over many scenarios; a failing check names the first rows that break it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from workbench.records import RunRecords

# Step ends are sums of durations; a step's start + duration may differ from the next
# step's start in the last bits.
TIME_TOLERANCE_S = 1e-9


def violations(
    records: RunRecords, kv_blocks: int | None = None, *, restarts: bool = False
) -> list[str]:
    """What `records` break. `kv_blocks`: a replica's KV blocks, if known. `restarts`: the
    policy may restart a request from zero (FCR), re-emitting what it had emitted."""
    checks: list[Callable[[], str | None]] = [
        lambda: _tokens_conserved(records, restarts),
        lambda: _steps_emit_what_spans_say(records),
        lambda: _kv_within(records, kv_blocks),
        lambda: _steps_back_to_back(records),
        lambda: _requests_ordered(records),
        lambda: _emissions_inside_requests(records),
        lambda: _step_counts_coherent(records),
    ]
    return [problem for check in checks if (problem := check()) is not None]


def _first(mask: np.ndarray, what: str, ids: np.ndarray) -> str | None:
    if not mask.any():
        return None
    bad = ids[mask]
    return f"{what}: {len(bad)} rows, first {bad[:5].tolist()}"


def _span_tokens(records: RunRecords) -> np.ndarray:
    e = records.emissions
    return (e.last_step - e.first_step + 1) * e.tokens_per_step  # (e,)


def _emitted_per_request(records: RunRecords) -> np.ndarray:
    r = records.requests
    order = np.argsort(r.request_id)
    rows = order[np.searchsorted(r.request_id, records.emissions.request_id, sorter=order)]
    return np.bincount(rows, weights=_span_tokens(records), minlength=len(r.request_id))


def _tokens_conserved(records: RunRecords, restarts: bool) -> str | None:
    r = records.requests
    emitted = _emitted_per_request(records)
    finished = r.status == "finished"
    if restarts:
        broken = finished & (emitted < r.output_tokens)
    else:
        broken = (finished & (emitted != r.output_tokens)) | (emitted < r.output_tokens)
    return _first(broken, "emissions do not add up to output_tokens", r.request_id)


class _StepIndex:
    """(replica, step) pairs as one integer key, for lookups between steps and spans."""

    def __init__(self, records: RunRecords) -> None:
        s = records.steps
        self.width = int(max(s.step.max(initial=0), records.emissions.last_step.max(initial=0))) + 2
        self.size = (int(s.replica.max(initial=0)) + 1) * self.width
        self.keys = self.key(s.replica, s.step)  # (s,)

    def key(self, replica: np.ndarray, step: np.ndarray) -> np.ndarray:
        return replica.astype(np.int64) * self.width + step


def _steps_emit_what_spans_say(records: RunRecords) -> str | None:
    s, e = records.steps, records.emissions
    index = _StepIndex(records)
    tokens = e.tokens_per_step.astype(np.int64)
    change = np.zeros(index.size + 1, dtype=np.int64)  # span tokens start and stop here
    np.add.at(change, index.key(e.replica, e.first_step), tokens)
    np.add.at(change, index.key(e.replica, e.last_step) + 1, -tokens)
    per_step = np.cumsum(change)[: index.size]  # (size,) tokens the spans emit per step
    at_steps = per_step[index.keys]  # (s,)
    if (orphans := int(per_step.sum() - at_steps.sum())) != 0:
        return f"emission spans cover {orphans} tokens at steps with no step row"
    return _first(at_steps != s.emitted_tokens, "steps.emitted_tokens differ from spans", s.step)


def _kv_within(records: RunRecords, kv_blocks: int | None) -> str | None:
    used = records.steps.kv_blocks_used
    over = (used < 0) if kv_blocks is None else (used < 0) | (used > kv_blocks)
    return _first(over, f"kv_blocks_used outside [0, {kv_blocks}]", records.steps.step)


def _steps_back_to_back(records: RunRecords) -> str | None:
    s = records.steps
    order = np.lexsort((s.step, s.replica))
    replica, step = s.replica[order], s.step[order]
    start, end = s.start_s[order], s.start_s[order] + s.duration_s[order]
    same = replica[1:] == replica[:-1]
    gaps = same & (step[1:] != step[:-1] + 1)
    if problem := _first(gaps, "a replica's step indices are not consecutive", step[1:]):
        return problem
    overlap = same & (start[1:] < end[:-1] - TIME_TOLERANCE_S)
    if problem := _first(overlap, "a step starts before the previous one ends", step[1:]):
        return problem
    return _first(s.duration_s < 0, "negative step duration", s.step)


def _requests_ordered(records: RunRecords) -> str | None:
    r = records.requests
    emitted = ~np.isnan(r.first_token_s)
    early = emitted & (r.first_token_s < r.arrival_s)
    if problem := _first(early, "first token before arrival", r.request_id):
        return problem
    finished = r.status == "finished"
    late = finished & ~(r.finish_s >= r.first_token_s)
    return _first(late, "finish before first token (or missing)", r.request_id)


def _emissions_inside_requests(records: RunRecords) -> str | None:
    s, e, r = records.steps, records.emissions, records.requests
    if len(e.request_id) == 0:
        return None
    index = _StepIndex(records)
    end_at = np.full(index.size, np.nan)
    end_at[index.keys] = s.start_s + s.duration_s  # (size,) step end by key
    first = end_at[index.key(e.replica, e.first_step)]  # (e,)
    last = end_at[index.key(e.replica, e.last_step)]  # (e,)
    order = np.argsort(r.request_id)
    rows = order[np.searchsorted(r.request_id, e.request_id, sorter=order)]
    starts_early = first < r.first_token_s[rows]
    ends_late = (r.status[rows] == "finished") & (last > r.finish_s[rows])
    missing = np.isnan(first) | np.isnan(last)
    broken = starts_early | ends_late | missing
    return _first(broken, "an emission outside [first token, finish]", e.request_id)


def _step_counts_coherent(records: RunRecords) -> str | None:
    s = records.steps
    checks = {
        "decode_tokens > batch_size": s.decode_tokens > s.batch_size,
        "accepted_tokens > drafted_tokens": s.accepted_tokens > s.drafted_tokens,
        "verified_tokens < decode_tokens": s.verified_tokens < s.decode_tokens,
        "negative token count": (s.prefill_tokens < 0) | (s.emitted_tokens < 0),
        # NaN (unrecorded) compares False: only recorded draft times are checked
        "draft_s outside [0, duration_s]": (s.draft_s < 0) | (s.draft_s > s.duration_s),
    }
    for what, broken in checks.items():
        if problem := _first(broken, what, s.step):
            return problem
    return None
