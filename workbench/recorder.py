"""Collects a run's records in typed columns (cheap appends, bulk extends)."""

from __future__ import annotations

from array import array

import numpy as np

from workbench.records import EmissionSpans, RequestRecords, StepRecords
from workbench.scheduling.sequence import Sequence


class _Columns:
    """Named typed arrays: append scalars or extend with numpy arrays at C speed."""

    def __init__(self, spec: dict[str, str]) -> None:
        self.spec = spec
        self.cols = {name: array(code) for name, code in spec.items()}

    def append(self, **values: float) -> None:
        cols = self.cols  # once per row: this runs for every step and span
        for name, value in values.items():
            cols[name].append(value)

    def extend(self, **values: np.ndarray) -> None:
        for name, value in values.items():
            dtype = np.float64 if self.spec[name] == "d" else np.int64
            self.cols[name].frombytes(np.ascontiguousarray(value, dtype=dtype).tobytes())

    def extend_constant(self, n: int, **values: float) -> None:
        for name, value in values.items():
            self.cols[name].extend(array(self.spec[name], [value]) * n)

    def numpy(self, name: str) -> np.ndarray:
        return np.frombuffer(
            self.cols[name], dtype=np.float64 if self.spec[name] == "d" else np.int64
        )


_STEP_SPEC = {
    "replica": "q", "step": "q", "start_s": "d", "duration_s": "d", "batch_size": "q",
    "prefill_tokens": "q", "decode_tokens": "q", "kv_blocks_used": "q", "emitted_tokens": "q",
    "drafted_tokens": "q", "accepted_tokens": "q", "verified_tokens": "q", "draft_s": "d",
}  # fmt: skip
_SPAN_SPEC = {"request_id": "q", "replica": "q", "first_step": "q", "last_step": "q", "tokens": "q"}


class Recorder:
    def __init__(self, num_requests: int) -> None:
        self.steps = _Columns(_STEP_SPEC)
        self.spans = _Columns(_SPAN_SPEC)
        self.replica = np.full(num_requests, -1, dtype=np.int32)  # (n,)
        self.arrival_s = np.full(num_requests, np.nan)  # (n,)
        self.first_token_s = np.full(num_requests, np.nan)  # (n,)
        self.finish_s = np.full(num_requests, np.nan)  # (n,)
        self.output_tokens = np.zeros(num_requests, dtype=np.int64)  # (n,)
        self.preemptions = np.zeros(num_requests, dtype=np.int32)  # (n,)

    def span(self, request_id: int, replica: int, first: int, last: int, tokens: int = 1) -> None:
        self.spans.append(
            request_id=request_id, replica=replica, first_step=first, last_step=last, tokens=tokens
        )

    def close_span(self, seq: Sequence, replica: int, last_step: int) -> None:
        """End `seq`'s open emission span (one token per step) at `last_step`."""
        if 0 <= seq.first_emit_step <= last_step:
            self.span(seq.request_id, replica, seq.first_emit_step, last_step)
        seq.first_emit_step = -1

    def burst(self, seq: Sequence, replica: int, step: int, tokens: int) -> None:
        """Step `step` emitted `tokens` for `seq` (a multi-token decoder): close the open
        span before it, write the step as its own row, and reopen the span after it."""
        self.close_span(seq, replica, step - 1)
        self.span(seq.request_id, replica, step, step, tokens)
        seq.first_emit_step = step + 1

    def request_records(self, prompt_tokens: np.ndarray) -> RequestRecords:
        finished = ~np.isnan(self.finish_s)
        return RequestRecords(
            request_id=np.arange(len(prompt_tokens), dtype=np.int64),
            replica=self.replica,
            arrival_s=self.arrival_s,
            first_token_s=self.first_token_s,
            finish_s=self.finish_s,
            prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64),
            output_tokens=self.output_tokens,
            preemptions=self.preemptions,
            status=np.where(finished, "finished", "unfinished").astype(object),
        )

    def step_records(self) -> StepRecords:
        s = self.steps
        order = np.lexsort((s.numpy("step"), s.numpy("replica")))  # by replica, then step
        col = {name: s.numpy(name)[order] for name in _STEP_SPEC}
        return StepRecords(
            replica=col["replica"].astype(np.int32),
            step=col["step"],
            start_s=col["start_s"],
            duration_s=col["duration_s"],
            batch_size=col["batch_size"].astype(np.int32),
            prefill_tokens=col["prefill_tokens"],
            decode_tokens=col["decode_tokens"],
            kv_blocks_used=col["kv_blocks_used"],
            emitted_tokens=col["emitted_tokens"],
            drafted_tokens=col["drafted_tokens"],
            accepted_tokens=col["accepted_tokens"],
            verified_tokens=col["verified_tokens"],
            draft_s=col["draft_s"],
        )

    def emission_spans(self) -> EmissionSpans:
        s = self.spans
        order = np.lexsort((s.numpy("first_step"), s.numpy("request_id")))
        return EmissionSpans(
            request_id=s.numpy("request_id")[order],
            replica=s.numpy("replica")[order].astype(np.int32),
            first_step=s.numpy("first_step")[order],
            last_step=s.numpy("last_step")[order],
            tokens_per_step=s.numpy("tokens")[order].astype(np.int32),
        )
