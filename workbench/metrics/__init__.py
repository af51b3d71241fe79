"""The one metrics module: every latency and throughput number comes from here.

Both backends, the CLI summary and the reports call `summarize` / `request_metrics` on the
same `RunRecords`, so a simulated and a real run are measured by one definition:

- TTFT = first emission − arrival; E2E = finish − arrival (completed requests only).
- TPOT = (E2E − TTFT) / (output tokens − 1) per request; undefined for one-token requests.
- ITL = gaps between consecutive emissions of a request. A multi-token emission (speculative,
  lookahead, APAR) is one emission: its tokens arrive together, so it adds one gap, as in
  vLLM's benchmark (one ITL entry per streamed chunk, whatever its token count); TPOT
  spreads the same time over every token, so TPOT < ITL when steps emit several.
- Throughput = completed requests (and tokens) / (last finish − first arrival).
- Goodput = completed requests meeting every given SLO / duration.
- Percentiles: linear interpolation, identical to numpy's default and DuckDB `quantile_cont`;
  `median` always, then `p{q}` for each requested percentile (default 90 and 99, the
  columns the results store keeps; `--percentiles` picks others, as vLLM's bench does).
- Saturation (`workbench.metrics.saturation`): whether the records show an overloaded engine.

Key names follow vLLM's benchmark (`mean_ttft_ms`, `p99_tpot_ms`, `request_goodput`...).
Runs of static-batch schedulers (the run's `info["scheduler"]`) also get the sequence-
scheduling paper's metrics, `effective_token_ratio` and co. (`workbench.metrics.batch`);
runs that drafted tokens get acceptance and tokens per step (`workbench.metrics.decoder`);
pipeline runs get runs launched/cancelled, wasted stage time, runs in flight
(`workbench.metrics.pipeline`).
Everything is vectorised numpy: ITL is never expanded to one row per token.
"""

from __future__ import annotations

import numpy as np

from workbench.errors import WorkbenchError
from workbench.metrics.apar import apar_summary, has_branches
from workbench.metrics.batch import STATIC_BATCH_SCHEDULERS, batch_summary
from workbench.metrics.decoder import decoder_summary, drafted_anything
from workbench.metrics.pipeline import has_pipeline_runs, pipeline_summary
from workbench.metrics.saturation import detect_saturation
from workbench.records import EmissionSpans, RunRecords, StepRecords
from workbench.scenario.system import SLOConfig

# Latency metrics in the order vLLM prints them; statistic prefixes of each.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILES: tuple[float, ...] = (90.0, 99.0)
STATISTICS = ("mean", "median", "std", *(f"p{q:g}" for q in DEFAULT_PERCENTILES))

Number = float | int | None
# A summary value: metrics are numbers; the saturation verdict is a flag and a sentence.
SummaryValue = float | int | bool | str | None


def percentile_name(q: float) -> str:
    """The statistic prefix of a percentile: 99 → p99, 99.9 → p99.9 (vLLM's key names)."""
    return f"p{q:g}"


def _quantiles(percentiles: tuple[float, ...]) -> dict[str, float]:
    """Statistic name → quantile in [0, 1]: the median, then each requested percentile."""
    for q in percentiles:
        if not 0.0 <= q <= 100.0:
            raise WorkbenchError(f"percentile {q:g} is outside 0..100", field="percentiles")
    return {"median": 0.5, **{percentile_name(q): q / 100.0 for q in percentiles}}


# ---------------------------------------------------------------- weighted percentiles


def weighted_quantile_cont(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """Quantile of the sample where `values[i]` occurs `counts[i]` times, with linear
    interpolation: exactly `np.quantile(np.repeat(values, counts), q)` (and DuckDB's
    `quantile_cont` up to rounding), without materialising the repeated sample.

    values: (k,) float, not NaN; counts: (k,) non-negative ints with a positive sum.
    """
    values = np.asarray(values, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    order = np.argsort(values)  # ties hold equal values, so stability does not matter
    sorted_values = values[order]  # (k,)
    cumulative = np.cumsum(counts[order])  # (k,): sorted positions < cumulative[i] hold i
    total = int(cumulative[-1]) if len(cumulative) else 0
    if total <= 0:
        raise ValueError("weighted_quantile_cont needs a positive total count")
    return _lerp_at_virtual_index(sorted_values, cumulative, total, q)


def _lerp_at_virtual_index(
    sorted_values: np.ndarray, cumulative: np.ndarray, total: int, q: float
) -> float:
    """numpy's `linear` method step by step (same float operations, so the same bits)."""
    virtual = np.float64(total - 1) * np.float64(q)
    previous = int(np.floor(virtual))
    if virtual >= total - 1:  # numpy clamps to the last element
        previous = nxt = total - 1
    elif virtual < 0:
        previous = nxt = 0
    else:
        nxt = previous + 1
    gamma = virtual - np.float64(np.floor(virtual))

    def at(position: int) -> np.float64:
        # The repeated sample's element at `position` is the first value whose
        # cumulative count exceeds it.
        return sorted_values[np.searchsorted(cumulative, position, side="right")]

    a, b = at(previous), at(nxt)
    diff = b - a
    # numpy's _lerp: interpolate from the nearer end, for monotonicity.
    result = b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma
    return float(result)


def describe(
    values: np.ndarray,
    counts: np.ndarray | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
) -> dict[str, Number]:
    """mean, median, std (population, like vLLM), each percentile (p90, p99 by default)
    and n of a (weighted) sample.

    values: (k,) float; counts: (k,) int or None for one each. Empty sample → Nones, n = 0.
    """
    values = np.asarray(values, dtype=np.float64)
    quantiles = _quantiles(percentiles)
    if counts is None:
        return _describe_unweighted(values, quantiles)
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return {**dict.fromkeys(["mean", "std", *quantiles]), "n": 0}
    order = np.argsort(values)  # ties hold equal values, so stability does not matter
    sorted_values = values[order]  # (k,)
    cumulative = np.cumsum(counts[order])  # (k,)
    mean = float(np.dot(values, counts) / n)
    variance = float(np.dot(counts, (values - mean) ** 2) / n)
    stats: dict[str, Number] = {"mean": mean, "std": float(np.sqrt(variance))}
    for name, q in quantiles.items():
        stats[name] = _lerp_at_virtual_index(sorted_values, cumulative, n, q)
    stats["n"] = n
    return stats


def _describe_unweighted(values: np.ndarray, quantiles: dict[str, float]) -> dict[str, Number]:
    """`describe` with one count each: np.quantile partitions instead of sorting."""
    if len(values) == 0:
        return {**dict.fromkeys(["mean", "std", *quantiles]), "n": 0}
    stats: dict[str, Number] = {"mean": float(values.mean()), "std": float(values.std())}
    points = np.quantile(values, list(quantiles.values()))  # linear method
    stats.update({name: float(v) for name, v in zip(quantiles, points, strict=True)})
    stats["n"] = len(values)
    return stats


# ---------------------------------------------------------------- per request


def request_metrics(records: RunRecords) -> dict[str, np.ndarray]:
    """Per-request columns for tables and CDFs, in the order of `records.requests`.

    Latencies are NaN where undefined (no token yet, unfinished, TPOT of a one-token
    request). Columns: request_id, replica, finished (bool), arrival_s, ttft_s, e2e_s,
    tpot_s, prompt_tokens, output_tokens, emissions (emission events), preemptions.
    """
    req = records.requests
    finished = np.asarray(req.status) == "finished"  # (n,) bool
    ttft_s = np.where(finished, req.first_token_s - req.arrival_s, np.nan)  # (n,)
    e2e_s = np.where(finished, req.finish_s - req.arrival_s, np.nan)  # (n,)
    output = np.asarray(req.output_tokens, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot_s = np.where(output > 1, (e2e_s - ttft_s) / (output - 1), np.nan)  # (n,)
    span_request = _span_request_index(req.request_id, records.emissions.request_id)
    span_emissions = records.emissions.last_step - records.emissions.first_step + 1  # (e,)
    emissions = np.bincount(span_request, weights=span_emissions, minlength=len(output))
    return {
        "request_id": np.asarray(req.request_id),
        "replica": np.asarray(req.replica),
        "finished": finished,
        "arrival_s": np.asarray(req.arrival_s, dtype=np.float64),
        "ttft_s": ttft_s,
        "e2e_s": e2e_s,
        "tpot_s": tpot_s,
        "prompt_tokens": np.asarray(req.prompt_tokens, dtype=np.int64),
        "output_tokens": output,
        "emissions": emissions.astype(np.int64),
        "preemptions": np.asarray(req.preemptions),
    }


def _span_request_index(request_ids: np.ndarray, span_request_ids: np.ndarray) -> np.ndarray:
    """Row of `records.requests` for each span: (e,) int64."""
    n = len(request_ids)
    span_request_ids = np.asarray(span_request_ids, dtype=np.int64)
    if n and np.array_equal(request_ids, np.arange(n)):  # the usual layout: id == row
        index = span_request_ids
        known = (index >= 0) & (index < n)
    else:
        order = np.argsort(request_ids, kind="stable")
        position = np.searchsorted(request_ids, span_request_ids, sorter=order)
        position = np.minimum(position, max(n - 1, 0))
        index = order[position] if n else position
        known = (request_ids[index] == span_request_ids) if n else position < 0
    if not np.all(known):
        bad = span_request_ids[~known][0]
        raise WorkbenchError(
            f"emission span of request {bad}, which has no request record",
            source="records",
            field="emissions.request_id",
        )
    return index


# ---------------------------------------------------------------- inter-token latency


def itl_sample(
    records: RunRecords, include: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token latencies as a weighted sample (values_s, counts), never per token.

    The gap between emissions at the ends of steps i−1 and i of one replica is
    end(i) − end(i−1) (end times, not durations: a replica can idle between steps). Every
    span covering steps first..last contributes the gaps of steps first+1..last, so each
    step's gap is counted once per span covering it and its predecessor; a difference
    array over spans gives those counts in O(steps + spans). Consecutive spans of one
    request (preemption, a decoder writing a span per step) add one explicit gap each.

    include: (n,) bool over requests (default: finished ones). Returns values (k,) float64
    and counts (k,) int64.
    """
    if include is None:
        include = np.asarray(records.requests.status) == "finished"
    spans = records.emissions
    span_request = _span_request_index(records.requests.request_id, spans.request_id)
    keep = include[span_request] & (np.asarray(spans.tokens_per_step) > 0)  # (e,)
    end_s, first_row, last_row = _span_rows(records.steps, spans, keep)
    within_values, within_counts = _within_span_gaps(end_s, first_row, last_row)
    across = _across_span_gaps(end_s, first_row, last_row, span_request[keep])
    values = np.concatenate([within_values, across])
    counts = np.concatenate([within_counts, np.ones(len(across), dtype=np.int64)])
    return values, counts


def _span_rows(
    steps: StepRecords, spans: EmissionSpans, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step end times in (replica, step) order and each kept span's first/last row in it.

    Returns end_s (s,) float64, first_row (e',) int64, last_row (e',) int64.
    """
    replica = np.asarray(steps.replica)
    step = np.asarray(steps.step, dtype=np.int64)
    end_s = np.asarray(steps.start_s, dtype=np.float64) + steps.duration_s  # (s,)
    if not _sorted_by_replica_step(replica, step):
        order = np.lexsort((step, replica))
        replica, step, end_s = replica[order], step[order], end_s[order]
    new_replica = np.ones(len(replica), dtype=bool)  # (s,): row starts a replica's steps
    new_replica[1:] = replica[1:] != replica[:-1]
    starts = np.flatnonzero(new_replica)  # (r,) first row of each replica
    counts = np.diff(np.r_[starts, len(replica)])  # (r,) steps per replica
    if not np.array_equal(step, np.arange(len(step)) - np.repeat(starts, counts)):
        raise WorkbenchError(
            "steps of each replica must be numbered 0, 1, 2... without gaps",
            source="records",
            field="steps.step",
        )
    if not keep.any():
        return end_s, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    span_replica = np.asarray(spans.replica)[keep]
    first, last = spans.first_step[keep].astype(np.int64), spans.last_step[keep].astype(np.int64)
    which = np.minimum(np.searchsorted(replica[starts], span_replica), max(len(starts) - 1, 0))
    valid = (len(starts) > 0) and np.all(replica[starts][which] == span_replica)
    if not valid or np.any((first < 0) | (first > last) | (last >= counts[which])):
        raise WorkbenchError(
            "emission span outside its replica's steps (or first_step > last_step)",
            source="records",
            field="emissions",
        )
    return end_s, starts[which] + first, starts[which] + last


def _sorted_by_replica_step(replica: np.ndarray, step: np.ndarray) -> bool:
    d_replica = np.diff(replica.astype(np.int64))
    return bool(np.all((d_replica > 0) | ((d_replica == 0) & (np.diff(step) > 0))))


def _within_span_gaps(
    end_s: np.ndarray, first_row: np.ndarray, last_row: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted gaps inside spans: for each step row g, how many spans cover g−1 and g."""
    n_rows = len(end_s)
    if n_rows == 0 or len(first_row) == 0:
        return np.empty(0), np.empty(0, dtype=np.int64)
    # +1 at first+1, −1 at last+1: the running sum counts spans covering rows first+1..last.
    delta = np.bincount(first_row + 1, minlength=n_rows + 1) - np.bincount(
        last_row + 1, minlength=n_rows + 1
    )
    cover = np.cumsum(delta[:n_rows])  # (s,)
    gap_s = np.diff(end_s, prepend=end_s[0])  # (s,): end(g) − end(g−1); row 0 is never used
    used = cover > 0
    return gap_s[used], cover[used].astype(np.int64)


def _across_span_gaps(
    end_s: np.ndarray, first_row: np.ndarray, last_row: np.ndarray, request: np.ndarray
) -> np.ndarray:
    """Gaps between consecutive spans of the same request: (m,) float64."""
    per_request = np.bincount(request, minlength=1)
    multi = per_request[request] > 1  # only requests with several spans need ordering
    request = request[multi]
    first_end, last_end = end_s[first_row[multi]], end_s[last_row[multi]]  # (m',)
    order = _order_by_request_then_time(request, first_end)
    request, first_end, last_end = request[order], first_end[order], last_end[order]
    same = request[1:] == request[:-1]
    return first_end[1:][same] - last_end[:-1][same]


def _order_by_request_then_time(request: np.ndarray, time_s: np.ndarray) -> np.ndarray:
    """Permutation sorting by (request, time); a lexsort, but 4-5x faster on millions."""
    d_request = np.diff(request)
    if np.all((d_request > 0) | ((d_request == 0) & (np.diff(time_s) >= 0))):
        return np.arange(len(request))  # already in order (a common layout)
    # One integer key request * m + time rank, unique per span: a single quick argsort.
    time_rank = np.empty(len(time_s), dtype=np.int64)
    time_rank[np.argsort(time_s)] = np.arange(len(time_s))
    return np.argsort(request.astype(np.int64) * len(time_s) + time_rank)


# ---------------------------------------------------------------- run summary


def summarize(
    records: RunRecords,
    slo: SLOConfig | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
) -> dict[str, SummaryValue]:
    """The run's headline numbers under vLLM's benchmark key names; None where undefined.

    percentiles: which `p{q}` latency keys besides the median (0..100)."""
    per_request = request_metrics(records)
    done = per_request["finished"]
    summary: dict[str, SummaryValue] = dict(_throughput(records, per_request))
    summary.update(_latency_stats(records, per_request, tuple(percentiles)))
    summary.update(_slo_stats(per_request, slo, summary["duration"]))
    summary["mean_tokens_per_emission"] = _tokens_per_emission(records, done)
    batch = np.asarray(records.steps.batch_size)
    summary["mean_batch_size"] = float(batch.mean()) if len(batch) else None
    summary["preemptions"] = int(np.asarray(records.requests.preemptions, dtype=np.int64).sum())
    if records.info.get("scheduler") in STATIC_BATCH_SCHEDULERS:
        summary.update(batch_summary(records))  # the sequence-scheduling paper's metrics
    if drafted_anything(records):
        summary.update(decoder_summary(records))  # speculative / lookahead decoders
    if has_pipeline_runs(records):
        summary.update(pipeline_summary(records))  # pipeline stages: runs, waste, in flight
    if has_branches(records):
        summary.update(apar_summary(records))  # APAR: forks, step compression, KV saved
    summary.update(detect_saturation(records.requests).as_summary())
    return summary


def _throughput(records: RunRecords, per_request: dict[str, np.ndarray]) -> dict[str, Number]:
    done = per_request["finished"]
    completed = int(done.sum())
    input_tokens = int(per_request["prompt_tokens"][done].sum())
    output_tokens = int(per_request["output_tokens"][done].sum())
    duration = _duration_s(records, done)

    def rate(amount: int) -> float | None:
        return amount / duration if duration else None

    return {
        "completed": completed,
        "num_requests": len(done),
        "duration": duration,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": rate(completed),
        "output_throughput": rate(output_tokens),
        "total_token_throughput": rate(input_tokens + output_tokens),
    }


def _duration_s(records: RunRecords, done: np.ndarray) -> float | None:
    """Last finish − first arrival; None without a completed request or a positive span."""
    arrival = np.asarray(records.requests.arrival_s, dtype=np.float64)
    if not done.any() or np.all(np.isnan(arrival)):
        return None
    duration = float(np.nanmax(records.requests.finish_s[done]) - np.nanmin(arrival))
    return duration if duration > 0 else None


def _latency_stats(
    records: RunRecords, per_request: dict[str, np.ndarray], percentiles: tuple[float, ...]
) -> dict[str, Number]:
    samples: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for metric, column in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2el", "e2e_s")):
        seconds = per_request[column]
        samples[metric] = (seconds[np.isfinite(seconds)] * 1000.0, None)
    itl_values, itl_counts = itl_sample(records, per_request["finished"])
    samples["itl"] = (itl_values * 1000.0, itl_counts)
    out: dict[str, Number] = {}
    for metric in LATENCY_METRICS:
        stats = describe(*samples[metric], percentiles=percentiles)
        for name in ("mean", "median", "std", *map(percentile_name, percentiles)):
            out[f"{name}_{metric}_ms"] = stats[name]
        out[f"n_{metric}"] = stats["n"]
    return out


def _slo_stats(
    per_request: dict[str, np.ndarray], slo: SLOConfig | None, duration: float | None
) -> dict[str, Number]:
    """request_goodput plus, per given SLO, the share of completed requests meeting it."""
    done = per_request["finished"]
    limits = _slo_limits(slo)
    if not limits:
        return {"request_goodput": None}
    meets_all = done.copy()
    out: dict[str, Number] = {}
    completed = int(done.sum())
    for name, (column, limit_ms) in limits.items():
        value_ms = per_request[column][done] * 1000.0
        # A one-token request has no TPOT and so cannot break a TPOT limit.
        undefined_ok = name == "tpot"
        meets = (value_ms <= limit_ms) | (np.isnan(value_ms) & undefined_ok)
        meets_all[done] &= meets
        out[f"slo_{name}_attainment"] = float(meets.mean()) if completed else None
    good = int(meets_all.sum())
    out["request_goodput"] = good / duration if duration else None
    return out


def _slo_limits(slo: SLOConfig | None) -> dict[str, tuple[str, float]]:
    if slo is None:
        return {}
    given = {"ttft": ("ttft_s", slo.ttft_ms), "tpot": ("tpot_s", slo.tpot_ms)}
    given["e2e"] = ("e2e_s", slo.e2e_ms)
    return {name: (col, limit) for name, (col, limit) in given.items() if limit is not None}


def _tokens_per_emission(records: RunRecords, done: np.ndarray) -> float | None:
    spans = records.emissions
    span_request = _span_request_index(records.requests.request_id, spans.request_id)
    keep = done[span_request]
    events = (spans.last_step - spans.first_step + 1)[keep].astype(np.int64)  # (e',)
    tokens = int(np.dot(events, spans.tokens_per_step[keep].astype(np.int64)))
    total_events = int(events.sum())
    return tokens / total_events if total_events else None
