"""Metrics of multi-token decoders (speculative, lookahead), from the records alone.

Both backends record per step `decode_tokens` (decoding sequences), `drafted_tokens`
(tokens proposed for them to verify beyond one each: a draft's proposal, or a lookahead
step's candidate n-grams), `accepted_tokens` (tokens they emitted beyond one each) and
`verified_tokens` (tokens the target computed for them: one each, the drafts, and a
lookahead step's Jacobi window too).
Decode emissions (`workbench.metrics.decode_emissions`) give tokens per sequence-step.

- acceptance_rate: accepted / drafted tokens, over all steps.
- mean_accepted_tokens: accepted tokens per decode sequence-step.
- mean_tokens_per_decode_step: tokens a decoding sequence emits per decode step (completed
  requests; each request's prefill emission left out); vanilla is 1.
- step_compression_ratio: per completed request, decode tokens / decode steps (the vanilla
  steps its tokens would have taken per step taken; the lookahead paper's S), averaged over
  requests; mean_tokens_per_decode_step is the same ratio pooled over all sequence-steps.
- extra_flops_share: target tokens computed for decodes (`verified_tokens`) over tokens they
  emitted, less 1: the linear-layer compute spent beyond the emitted tokens (rejected drafts,
  and lookahead's window), relative to a vanilla decode of the same tokens.
- acceptance_at_position_i: P(accepted ≥ i | drafted ≥ i), from decode emissions of
  completed requests: a step drafts position i exactly when its room (output tokens still to
  emit, less one) is at least i, for a fixed k ≥ i. Positions 1 up to the longest accepted
  run observed (at most MAX_POSITIONS).

APAR runs that speculate record a request's branches as one emission per step, so the
emission-based metrics (tokens per decode step, step compression, acceptance by position)
would count branches as accepted tokens: for them only the step-based ones are reported
(branches are sequences there), and APAR's own metrics (`workbench.metrics.apar`) the rest.
"""

from __future__ import annotations

import numpy as np

from workbench.metrics.decode_emissions import DecodeEmissions, decode_emissions
from workbench.records import RunRecords

MAX_POSITIONS = 16

Number = float | int | None


def drafted_anything(records: RunRecords) -> bool:
    return int(np.asarray(records.steps.drafted_tokens, dtype=np.int64).sum()) > 0


def decoder_summary(records: RunRecords) -> dict[str, Number]:
    """The multi-token decoder metrics of a run (see the module docstring)."""
    steps = records.steps
    drafted = int(np.asarray(steps.drafted_tokens, dtype=np.int64).sum())
    accepted = int(np.asarray(steps.accepted_tokens, dtype=np.int64).sum())
    sequence_steps = int(np.asarray(steps.decode_tokens, dtype=np.int64).sum())
    verified = int(np.asarray(steps.verified_tokens, dtype=np.int64).sum())
    out: dict[str, Number] = {
        "acceptance_rate": _ratio(accepted, drafted),
        "mean_accepted_tokens": _ratio(accepted, sequence_steps),
        "extra_flops_share": _extra_share(verified, sequence_steps + accepted),
    }
    if records.branches is not None:  # APAR: an emission is a request's branches together
        return out
    emissions = decode_emissions(records)
    out["mean_tokens_per_decode_step"] = _ratio(
        int(np.dot(emissions.tokens, emissions.count)), int(emissions.count.sum())
    )
    out["step_compression_ratio"] = _per_request_compression(
        emissions, len(records.requests.status)
    )
    out.update(position_acceptance(emissions))
    return out


def position_acceptance(emissions: DecodeEmissions) -> dict[str, Number]:
    """acceptance_at_position_i = P(accepted ≥ i | drafted ≥ i), i = 1…"""
    active = emissions.count > 0
    longest = int(emissions.tokens[active].max(initial=1)) - 1
    out: dict[str, Number] = {}
    for i in range(1, min(longest, MAX_POSITIONS) + 1):
        drafted = emissions.with_room(i)  # (e,) emissions that drafted position i
        accepted = np.where(emissions.tokens - 1 >= i, drafted, 0)
        out[f"acceptance_at_position_{i}"] = _ratio(int(accepted.sum()), int(drafted.sum()))
    return out


def _per_request_compression(emissions: DecodeEmissions, num_requests: int) -> float | None:
    tokens = np.bincount(
        emissions.request_row, weights=emissions.tokens * emissions.count, minlength=num_requests
    )
    steps = np.bincount(emissions.request_row, weights=emissions.count, minlength=num_requests)
    decoded = steps > 0
    return float(np.mean(tokens[decoded] / steps[decoded])) if decoded.any() else None


def _extra_share(computed: int, emitted: int) -> float | None:
    return computed / emitted - 1.0 if emitted else None


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def category_breakdown(records: RunRecords) -> dict[str, dict[str, Number]]:
    """Per prompt category (requests carrying one): completed requests, mean TPOT in ms and
    tokens per decode step. Empty when no request has a category."""
    category = getattr(records.requests, "category", None)
    if category is None:
        return {}
    labels = np.asarray(category, dtype=object)  # (n,)
    req = records.requests
    done = (np.asarray(req.status) == "finished") & np.array([c is not None for c in labels])
    if not done.any():
        return {}
    output = np.asarray(req.output_tokens, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot_ms = (req.finish_s - req.first_token_s) / (output - 1) * 1000.0  # (n,)
    emissions = decode_emissions(records)
    emission_label = labels[emissions.request_row]  # (e,)
    out: dict[str, dict[str, Number]] = {}
    for name in sorted({str(c) for c in labels[done]}):
        members = done & (labels == name)
        tpot = tpot_ms[members & (output > 1)]
        spans = emission_label == name
        out[name] = {
            "completed": int(members.sum()),
            "mean_tpot_ms": float(tpot.mean()) if len(tpot) else None,
            "mean_tokens_per_decode_step": _ratio(
                int(np.dot(emissions.tokens[spans], emissions.count[spans])),
                int(emissions.count[spans].sum()),
            ),
        }
    return out
