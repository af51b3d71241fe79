"""`decoder.calibrate_from`: a step model's distribution measured on a stored run.

The run's decode emissions (`workbench.metrics.decode_emissions`: the prefill's emission of each
request left out) give tokens per sequence and decode step. Emissions a sequence's output
length capped (room below the run's decoder headroom K: k drafts, a tree's depth, N − 1 for
lookahead) are left out too, so the histogram is the decoder's own, uncapped: the simulator
caps its draws again near each sequence's end. Index i of the result counts steps that
emitted i tokens beyond the first. A speculative run with a chain draft also gives
per-position acceptance rates of a few request types and of each sequence, shrunk to its
types' (`chain_calibration`), which its simulated twin draws from: acceptance differs between
requests, and a run with an adaptive draft length drafted fewer tokens after poor acceptance,
so its histogram is not a full draft's (it keeps the types
only). A lookahead run gives its histograms by output position, by request type and of each
request, shrunk to its types' (`position_calibration`: its pool fills from the output as it
grows, so its steps emit more late in an output than early, and some requests' texts fill it
sooner), and its candidate
n-grams per sequence and step by output position (`candidate_calibration`: fed beyond the
window, fewer than a full pool's and fewer early in an output), which the twin feeds instead of
a full pool's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import TypeAdapter, ValidationError

from simulator.decoders import lookahead, speculative
from simulator.decoders.acceptance import (
    AcceptanceByPosition,
    AcceptanceDistribution,
    AcceptanceMixture,
)
from simulator.decoders.candidate_calibration import CandidateMeasurement, measure_candidates
from simulator.decoders.chain_calibration import (
    ChainMeasurement,
    UnreachedPosition,
    fixed_length,
    measure_chain,
)
from simulator.decoders.lookahead_candidates import CandidatesByPosition
from simulator.decoders.position_calibration import PositionMeasurement, measure_positions
from simulator.stored_runs import stored_run
from workbench.errors import WorkbenchError
from workbench.metrics.decode_emissions import DecodeEmissions, decode_emissions
from workbench.scenario.decoders import (
    DecoderConfig,
    LookaheadDecoderConfig,
    SpeculativeDecoderConfig,
)

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore

FIELD = "decoder.calibrate_from"
CALIBRATABLE = ("speculative", "lookahead")


@dataclass(frozen=True)
class Calibration:
    run_id: str  # the full id of the run measured
    # A fixed draft's run: (K + 1,) int64, steps by tokens emitted beyond the first.
    accepted_counts: np.ndarray | None = None
    # A chain draft's run: per-position rates, pooled and by request type.
    chain: ChainMeasurement | None = None
    # A fixed chain's run whose types could not be measured: why (its histogram is drawn).
    types_unmeasured: str | None = None
    # A lookahead run: candidate n-grams fed per decoding sequence and step by output position;
    # and its histograms by output position, by request type and of each measured request.
    candidates: CandidateMeasurement | None = None
    candidates_unmeasured: str | None = None  # why not (the twin then feeds a full pool)
    positions: PositionMeasurement | None = None

    def distribution(self, k: int) -> AcceptanceDistribution:
        """Tokens a full draft of k (room for k more) accepts beyond its first."""
        if self.accepted_counts is not None:
            return AcceptanceDistribution.histogram(self.accepted_counts, k)
        assert self.chain is not None
        return AcceptanceDistribution.positional(self._rates(self.chain.rates, k), k, FIELD)

    def mixture(self, k: int) -> AcceptanceMixture | None:
        """A chain draft's measured sequences, each with its own rates (shrunk to its request
        types') as a full draft of k, drawn alike (None from a tree's run, whose histogram is
        drawn for every step alike)."""
        if self.chain is None:
            return None
        sequences = tuple(
            AcceptanceDistribution.positional(self._rates(rates, k), k, FIELD)
            for rates in self.chain.sequence_rates
        )
        alike = np.full(len(sequences), 1.0 / len(sequences))  # (M,)
        first = self._rates(self.chain.first_rates, k)
        return AcceptanceMixture(
            alike, sequences, AcceptanceDistribution.positional(first, k, FIELD)
        )

    def by_position(self, k: int) -> AcceptanceByPosition | None:
        """A lookahead run's acceptance by output position of each measured request (its own
        rows, shrunk to its request types'), drawn alike (None from other runs)."""
        if self.positions is None:
            return None
        rows = tuple(
            tuple(AcceptanceDistribution.histogram(c, k) for c in by_range)
            for by_range in self.positions.sequence_rows
        )
        alike = np.full(len(rows), 1.0 / len(rows))  # (M,)
        return AcceptanceByPosition(self.positions.starts, rows, alike)

    def candidates_by_position(self, tail: int) -> CandidatesByPosition | None:
        """A lookahead run's candidate n-grams by output position, of `tail` tokens each (None
        from other runs and from one that did not record its window)."""
        if self.candidates is None:
            return None
        return CandidatesByPosition(self.candidates.starts, self.candidates.ngrams, tail)

    def _rates(self, rates: np.ndarray, k: int) -> list[float]:
        """Rates of drafted positions 1..k. Beyond the run's longest draft: none accepted, as
        its histogram says, for a fixed draft's run; an adaptive run's has no histogram, so a
        longer draft than it drafted is refused."""
        drafted = len(rates)
        if k > drafted and self.accepted_counts is None:
            raise WorkbenchError(
                f"run {self.run_id} drafted at most {drafted} tokens; it cannot calibrate "
                f"{k} drafted positions",
                field=FIELD,
            )
        return rates.tolist()[:k] + [0.0] * max(k - drafted, 0)

    def info(self) -> dict[str, str]:
        """Facts for the simulated run's info: the run, and what was measured on it."""
        measured: dict[str, object] = {}
        if self.accepted_counts is not None:
            measured["calibrated_accepted_counts"] = self.accepted_counts.tolist()
        if self.types_unmeasured is not None:
            measured["calibrated_types_unmeasured"] = self.types_unmeasured
        if self.candidates is not None:
            measured |= {
                "calibrated_candidate_tokens": round(self.candidates.mean_tokens, 4),
                "calibrated_candidate_ngrams": np.round(self.candidates.ngrams, 4).tolist(),
                "calibrated_candidate_steps": self.candidates.steps,
            }
        if self.candidates_unmeasured is not None:
            measured["calibrated_candidates_unmeasured"] = self.candidates_unmeasured
        if self.positions is not None:
            measured |= {
                "calibrated_position_starts": self.positions.starts.tolist(),
                "calibrated_position_counts": self.positions.counts.tolist(),
                "calibrated_type_weights": np.round(self.positions.type_weights, 6).tolist(),
                "calibrated_type_counts": np.round(self.positions.type_counts, 3).tolist(),
                "calibrated_sequences": len(self.positions.sequence_rows),
                "calibrated_shrinkage_steps": self.positions.shrinkage,
            }
        if self.chain is not None:
            measured |= {
                "calibrated_acceptance_rates": np.round(self.chain.rates, 6).tolist(),
                "calibrated_first_step_rates": np.round(self.chain.first_rates, 6).tolist(),
                "calibrated_type_weights": np.round(self.chain.type_weights, 6).tolist(),
                "calibrated_type_rates": np.round(self.chain.type_rates, 6).tolist(),
                "calibrated_sequences": len(self.chain.sequence_rates),
                "calibrated_shrinkage_steps": self.chain.shrinkage,
            }
        return {"calibrated_from": self.run_id, **{k: json.dumps(v) for k, v in measured.items()}}


def calibrate(store: ResultsStore | None, run_ref: str) -> Calibration:
    """What run `run_ref` (an id or unique prefix) in `store` measured of its decoder."""
    store, run = stored_run(store, run_ref, FIELD, f"calibrating from run {run_ref!r}")
    if run["decoder"] not in CALIBRATABLE:
        raise WorkbenchError(
            f"run {run['run_id']} used the {run['decoder']} decoder; calibrate from a "
            "speculative or lookahead run",
            field=FIELD,
        )
    decoder = _decoder(run)
    records = store.load_records(run["run_id"])
    emissions = decode_emissions(records)
    run_id = str(run["run_id"])
    if isinstance(decoder, LookaheadDecoderConfig):
        histogram = _histogram(run, decoder, emissions)
        positions = measure_positions(emissions, _headroom(decoder), len(histogram))
        candidates = measure_candidates(emissions, records.steps, positions.starts, decoder)
        unmeasured = candidates if isinstance(candidates, str) else None
        return Calibration(
            run_id,
            accepted_counts=histogram,
            candidates=None if isinstance(candidates, str) else candidates,
            candidates_unmeasured=unmeasured,
            positions=positions,
        )
    if not isinstance(decoder, SpeculativeDecoderConfig) or decoder.tree is not None:
        return Calibration(run_id, accepted_counts=_histogram(run, decoder, emissions))
    k = decoder.num_speculative_tokens
    if decoder.adaptive is not None:
        return Calibration(run_id, chain=measure_chain(emissions, k, decoder.adaptive, FIELD))
    histogram = _histogram(run, decoder, emissions)
    try:
        chain = measure_chain(emissions, k, fixed_length(k), FIELD)
    except UnreachedPosition as error:  # too few or too short steps: the histogram alone
        return Calibration(run_id, accepted_counts=histogram, types_unmeasured=error.detail)
    return Calibration(run_id, accepted_counts=histogram, chain=chain)


def _histogram(run: dict, decoder: DecoderConfig, emissions: DecodeEmissions) -> np.ndarray:
    """Steps by tokens beyond the first, of those its output length did not cap."""
    headroom = _headroom(decoder)
    accepted = emissions.histogram(headroom)[1:]  # index = tokens beyond the first
    if accepted.sum() == 0:
        raise WorkbenchError(
            f"run {run['run_id']} has no decode step with room for {headroom} more tokens "
            "to calibrate from (outputs too short?)",
            field=FIELD,
        )
    return accepted


def _decoder(run: dict) -> DecoderConfig:
    try:
        section = json.loads(run["config_json"])["decoder"]
        return TypeAdapter(DecoderConfig).validate_python(section)
    except (KeyError, TypeError, ValueError, ValidationError):
        raise WorkbenchError(
            f"run {run['run_id']} has no readable decoder configuration", field=FIELD
        ) from None


def _headroom(decoder: DecoderConfig) -> int:
    """Most tokens beyond the first a step of the run's decoder could emit."""
    if isinstance(decoder, SpeculativeDecoderConfig):
        return speculative.max_accepted_tokens(decoder)
    return lookahead.max_accepted_tokens(decoder)  # type: ignore[arg-type]
