"""Hand-made runs of a multi-token decoder: requests served one after another on one
replica, each step writing its own emission row (as the real engine's bursts do)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from fixtures_records import make_meta

from simulator.decoders import chain_calibration
from simulator.decoders.calibration import Calibration, calibrate
from workbench.records import EmissionSpans, RequestRecords, RunMeta, RunRecords, StepRecords
from workbench.scenario.decoders import AdaptiveKConfig
from workbench.scheduling.adaptive_draft import AdaptiveDraftLength
from workbench.store.db import ResultsStore

STEP_S = 0.01
PROMPT_TOKENS = 10


def sequential_run(
    outputs: list[int],
    accept: Callable[[int], int] | list[Callable[[int], int]],
    k: int,
    category: list | None = None,
    adaptive: AdaptiveKConfig | None = None,
) -> RunRecords:
    """Request i emits outputs[i] tokens: one at its prefill step, then per decode step
    1 + min(accept(room), drafted) with room = tokens left − 1 and drafted = min(k, room)
    (with `adaptive`: the adaptive rule's length instead of k); `accept` may be a list, one
    per request."""
    steps: list[tuple[int, int, int, int, int]] = []  # prefill, decode, emitted, drafted, accepted
    spans: list[tuple[int, int, int]] = []  # request, step, tokens
    first_step, last_step = [], []
    rule = None if adaptive is None else AdaptiveDraftLength(k, adaptive)
    for request, output in enumerate(outputs):
        first_step.append(len(steps))
        steps.append((PROMPT_TOKENS, 0, 1, 0, 0))
        spans.append((request, len(steps) - 1, 1))
        emitted = 1
        while emitted < output:
            room = output - emitted - 1
            drafted = min(k if rule is None else rule.length(request), room)
            draw = accept[request] if isinstance(accept, list) else accept
            extra = min(draw(room), drafted)
            if rule is not None:
                rule.remember(request, extra)
            steps.append((0, 1, 1 + extra, drafted, extra))
            spans.append((request, len(steps) - 1, 1 + extra))
            emitted += 1 + extra
        last_step.append(len(steps) - 1)
    return _records(outputs, steps, spans, first_step, last_step, category)


def _records(outputs, steps, spans, first_step, last_step, category) -> RunRecords:
    n, s = len(outputs), len(steps)
    cols = np.array(steps, dtype=np.int64).reshape(s, 5)
    start = np.arange(s) * STEP_S
    requests = RequestRecords(
        request_id=np.arange(n, dtype=np.int64),
        replica=np.zeros(n, dtype=np.int32),
        arrival_s=start[first_step],
        first_token_s=start[first_step] + STEP_S,
        finish_s=start[last_step] + STEP_S,
        prompt_tokens=np.full(n, PROMPT_TOKENS, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
        preemptions=np.zeros(n, dtype=np.int32),
        status=np.full(n, "finished", dtype=object),
        category=None if category is None else np.array(category, dtype=object),
    )
    step_records = StepRecords(
        replica=np.zeros(s, dtype=np.int32), step=np.arange(s, dtype=np.int64),
        start_s=start, duration_s=np.full(s, STEP_S), batch_size=np.ones(s, dtype=np.int32),
        prefill_tokens=cols[:, 0], decode_tokens=cols[:, 1], kv_blocks_used=np.ones(s, np.int64),
        emitted_tokens=cols[:, 2], drafted_tokens=cols[:, 3], accepted_tokens=cols[:, 4],
        verified_tokens=cols[:, 1] + cols[:, 3],
    )  # fmt: skip
    span = np.array(spans, dtype=np.int64).reshape(len(spans), 3)
    emissions = EmissionSpans(
        request_id=span[:, 0], replica=np.zeros(len(span), dtype=np.int32),
        first_step=span[:, 1], last_step=span[:, 1], tokens_per_step=span[:, 2].astype(np.int32),
    )  # fmt: skip
    return RunRecords(requests, step_records, emissions)


def speculative_meta(
    run_id: str, k: int, backend: str = "real", adaptive: dict | None = None
) -> RunMeta:
    decoder = {"kind": "speculative", "num_speculative_tokens": k}
    if adaptive is not None:
        decoder["adaptive"] = adaptive
    config = {"name": "spec", "decoder": decoder}
    return make_meta(
        run_id, config=config, backend=backend, decoder="speculative", scenario_name="spec"
    )


def draw_from(probabilities: list[float], seed: int) -> Callable[[int], int]:
    """accept(room) drawing accepted counts from `probabilities` (index = accepted)."""
    rng = np.random.default_rng(seed)
    return lambda room: int(rng.choice(len(probabilities), p=probabilities))


def two_kinds_of_request(n: int, seed: int) -> list[Callable[[int], int]]:
    """40 % of requests accept a drafted token with rate 0.3, 60 % with 0.9; every first
    decode step accepts none."""
    rng = np.random.default_rng(seed)
    return [request_of_rate(0.3 if rng.random() < 0.4 else 0.9, rng) for _ in range(n)]


def kinds_of_request(n: int, rates: tuple[float, ...], seed: int) -> list[Callable[[int], int]]:
    """Each request accepts a drafted token with one of `rates`, drawn alike; every first
    decode step accepts none."""
    rng = np.random.default_rng(seed)
    return [request_of_rate(float(rng.choice(rates)), rng) for _ in range(n)]


def requests_of_their_own(n: int, seed: int) -> tuple[np.ndarray, list[Callable[[int], int]]]:
    """Each request accepts drafted position i with its own rate, each uniform on
    [0.05, 0.99]: (rates (n, 4), accept functions); every first decode step accepts none."""
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.05, 0.99, (n, 4))
    return rates, [request_of_rate(row, rng) for row in rates]


def request_of_rate(rate: float | np.ndarray, rng: np.random.Generator) -> Callable[[int], int]:
    """accept(room) of a request accepting each of 4 drafted tokens with `rate` (or rate[i]
    for position i + 1) until the first rejection; its first decode step accepts none."""
    steps = iter(range(10**6))

    def accept(room: int) -> int:
        accepted = np.append(rng.random(4) < rate, False)  # the first rejection ends it
        return 0 if next(steps) == 0 else int(np.argmin(accepted))

    return accept


def calibrated_by_types_alone(
    store: ResultsStore, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> Calibration:
    """The stored run's calibration with every measured request shrunk all the way to its
    request types' (the shrinkage grid cut to its last value)."""
    last = chain_calibration.SHRINKAGE_GRID[-1]
    monkeypatch.setattr(chain_calibration, "SHRINKAGE_GRID", (last,))
    return calibrate(store, run_id)
