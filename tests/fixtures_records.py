"""Hand-made and synthetic `RunRecords` for metrics, store and report tests.

`make_records` builds a small timeline from readable specs and derives everything the specs
imply (first token, finish, output tokens, batch sizes) so tests state only what matters.
`synthetic_records` builds a large consistent run quickly, for speed and crash tests.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np

from workbench.records import EmissionSpans, RequestRecords, RunMeta, RunRecords, StepRecords

Span = tuple[int, int, int, int]  # (replica, first_step, last_step, tokens_per_step)


@dataclass
class RequestSpec:
    request_id: int
    arrival_s: float
    spans: list[Span] = field(default_factory=list)  # in time order
    prompt_tokens: int = 10
    status: str = "finished"
    preemptions: int = 0


def make_records(
    steps: dict[int, list[tuple[float, float]]],
    requests: list[RequestSpec],
    info: dict[str, str] | None = None,
) -> RunRecords:
    """steps: replica → [(start_s, duration_s), ...] in step order (step index = position)."""
    step_records = _make_steps(steps, requests)
    end = {(r, i): s + d for r, rows in steps.items() for i, (s, d) in enumerate(rows)}
    rows = [_request_row(spec, end) for spec in requests]
    columns = list(zip(*rows, strict=True)) if rows else [[]] * 9
    dtypes = (np.int64, np.int32, float, float, float, np.int64, np.int64, np.int32, object)
    req = RequestRecords(*(np.array(c, dtype=t) for c, t in zip(columns, dtypes, strict=True)))
    spans = [(spec.request_id, *span) for spec in requests for span in spec.spans]
    span_cols = list(zip(*spans, strict=True)) if spans else [[]] * 5
    span_dtypes = (np.int64, np.int32, np.int64, np.int64, np.int32)
    emissions = EmissionSpans(
        *(np.array(c, dtype=t) for c, t in zip(span_cols, span_dtypes, strict=True))
    )
    return RunRecords(req, step_records, emissions, dict(info or {}))


def _request_row(spec: RequestSpec, end: dict[tuple[int, int], float]) -> tuple:
    first = spec.spans[0] if spec.spans else None
    last = spec.spans[-1] if spec.spans else None
    first_token_s = end[(first[0], first[1])] if first else np.nan
    done = spec.status == "finished"
    finish_s = end[(last[0], last[2])] if (last and done) else np.nan
    output = sum((b - a + 1) * tps for _, a, b, tps in spec.spans)
    replica = first[0] if first else 0
    return (
        spec.request_id,
        replica,
        spec.arrival_s,
        first_token_s,
        finish_s,
        spec.prompt_tokens,
        output,
        spec.preemptions,
        spec.status,
    )


def _make_steps(steps: dict[int, list[tuple[float, float]]], requests: list[RequestSpec]):
    """Step rows; batch size and emitted tokens counted from the spans covering each step."""
    batch: dict[tuple[int, int], int] = {}
    emitted: dict[tuple[int, int], int] = {}
    for spec in requests:
        for replica, first, last, tps in spec.spans:
            for i in range(first, last + 1):
                batch[(replica, i)] = batch.get((replica, i), 0) + 1
                emitted[(replica, i)] = emitted.get((replica, i), 0) + tps
    keys = [(r, i) for r in sorted(steps) for i in range(len(steps[r]))]
    bs = np.array([batch.get(k, 0) for k in keys], dtype=np.int32)
    return StepRecords(
        replica=np.array([r for r, _ in keys], dtype=np.int32),
        step=np.array([i for _, i in keys], dtype=np.int64),
        start_s=np.array([steps[r][i][0] for r, i in keys], dtype=float),
        duration_s=np.array([steps[r][i][1] for r, i in keys], dtype=float),
        batch_size=bs,
        prefill_tokens=np.zeros(len(keys), dtype=np.int64),
        decode_tokens=bs.astype(np.int64),
        kv_blocks_used=2 * bs.astype(np.int64),
        emitted_tokens=np.array([emitted.get(k, 0) for k in keys], dtype=np.int64),
        drafted_tokens=np.zeros(len(keys), dtype=np.int64),
        accepted_tokens=np.zeros(len(keys), dtype=np.int64),
        verified_tokens=bs.astype(np.int64),
    )


def make_meta(run_id: str, **overrides: object) -> RunMeta:
    """A RunMeta with plausible defaults; `config_json` carries hardware, slo and rate."""
    config = overrides.pop("config", None) or {
        "name": overrides.get("scenario_name", "tiny"),
        "hardware": {"gpu": "a100-80gb", "replicas": 1, "tensor_parallel": 1},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0}},
        "slo": {"ttft_ms": 500.0, "tpot_ms": None, "e2e_ms": None},
    }

    now = time.time()
    fields: dict[str, object] = {
        "run_id": run_id,
        "scenario_name": "tiny",
        "scenario_hash": f"hash-{run_id}",
        "config_json": json.dumps(config, sort_keys=True),
        "backend": "sim",
        "decoder": "vanilla",
        "scheduler": "continuous",
        "seed": 0,
        "versions": {"workbench": "0.1.0"},
        "git_sha": None,
        "started_at": now - 1.0,
        "finished_at": now,
        "sweep_point": None,
    }
    fields.update(overrides)
    return RunMeta(**fields)  # type: ignore[arg-type]


# ---------------------------------------------------------------- synthetic, large


def synthetic_records(
    n_requests: int, n_steps: int, n_spans: int, replicas: int = 4, seed: int = 0
) -> RunRecords:
    """A consistent random run: each request has n_spans // n_requests spans on one replica,
    in time order; steps have random durations and occasional idle gaps."""
    rng = np.random.default_rng(seed)
    steps_per_replica = n_steps // replicas
    k = n_spans // n_requests
    assert steps_per_replica * replicas == n_steps and k * n_requests == n_spans
    steps = _synthetic_steps(rng, replicas, steps_per_replica)
    end_s = (steps.start_s + steps.duration_s).reshape(replicas, steps_per_replica)
    emissions = _synthetic_spans(rng, n_requests, k, replicas, steps_per_replica)
    requests = _synthetic_requests(rng, emissions, end_s, n_requests, k)
    return RunRecords(requests, steps, emissions, {"device": "synthetic"})


def _synthetic_steps(rng: np.random.Generator, replicas: int, per: int) -> StepRecords:
    n = replicas * per
    duration = rng.uniform(0.01, 0.03, n)  # (s,)
    idle = np.where(rng.random(n) < 0.05, rng.uniform(0, 0.1, n), 0.0)  # (s,)
    start = (
        np.cumsum((duration + idle).reshape(replicas, per), axis=1)
        - duration.reshape(replicas, per)
    ).ravel()
    batch = rng.integers(1, 64, n).astype(np.int32)
    return StepRecords(
        replica=np.repeat(np.arange(replicas, dtype=np.int32), per),
        step=np.tile(np.arange(per, dtype=np.int64), replicas),
        start_s=start,
        duration_s=duration,
        batch_size=batch,
        prefill_tokens=rng.integers(0, 512, n),
        decode_tokens=batch.astype(np.int64),
        kv_blocks_used=rng.integers(0, 4096, n),
        emitted_tokens=batch.astype(np.int64),
        drafted_tokens=np.zeros(n, dtype=np.int64),
        accepted_tokens=np.zeros(n, dtype=np.int64),
        verified_tokens=batch.astype(np.int64),
    )


def _synthetic_spans(
    rng: np.random.Generator, n: int, k: int, replicas: int, per: int
) -> EmissionSpans:
    max_len = 8
    stride = max_len + 2  # spans of one request never touch
    request = np.repeat(np.arange(n, dtype=np.int64), k)  # (e,)
    replica = (request % replicas).astype(np.int32)
    base = np.repeat(rng.integers(0, per - k * stride, n), k)  # (e,)
    first = base + np.tile(np.arange(k), n) * stride + rng.integers(0, 2, n * k)
    last = first + rng.integers(0, max_len, n * k)
    tps = np.where(rng.random(n * k) < 0.1, 3, 1).astype(np.int32)
    return EmissionSpans(request, replica, first, last, tps)


def _synthetic_requests(
    rng: np.random.Generator, spans: EmissionSpans, end_s: np.ndarray, n: int, k: int
) -> RequestRecords:
    first = spans.first_step.reshape(n, k)[:, 0]
    last = spans.last_step.reshape(n, k)[:, -1]
    replica = spans.replica.reshape(n, k)[:, 0]
    first_token = end_s[replica, first]
    arrival = np.maximum(first_token - rng.uniform(0.05, 0.5, n), 0.0)
    finished = rng.random(n) < 0.98
    tokens = ((spans.last_step - spans.first_step + 1) * spans.tokens_per_step).reshape(n, k)
    return RequestRecords(
        request_id=np.arange(n, dtype=np.int64),
        replica=replica,
        arrival_s=arrival,
        first_token_s=first_token,
        finish_s=np.where(finished, end_s[replica, last], np.nan),
        prompt_tokens=rng.integers(1, 2048, n),
        output_tokens=tokens.sum(axis=1).astype(np.int64),
        preemptions=np.full(n, k - 1, dtype=np.int32),
        status=np.where(finished, "finished", "unfinished").astype(object),
    )


def assert_tokens_conserved(records: RunRecords) -> None:
    """Every request finished, and its emission rows add up to its output length."""
    req, spans = records.requests, records.emissions
    assert (req.status == "finished").all()
    per_request = np.bincount(
        spans.request_id,
        weights=(spans.last_step - spans.first_step + 1) * spans.tokens_per_step,
        minlength=len(req.request_id),
    )
    assert np.array_equal(per_request, req.output_tokens)
    assert records.steps.emitted_tokens.sum() == req.output_tokens.sum()
