"""`decoder.calibrate_from`: a step model's distribution measured on a stored run.

The run's decode emissions (`workbench.metrics.decode_emissions`: the prefill's emission of each
request left out) give tokens per sequence and decode step. Emissions a sequence's output
length capped (room below the run's decoder headroom K: k drafts, a tree's depth, N − 1 for
lookahead) are left out too, so the histogram is the decoder's own, uncapped: the simulator
caps its draws again near each sequence's end. Index i of the result counts steps that
emitted i tokens beyond the first. A speculative run with an adaptive draft length gives
per-position acceptance rates of a few request types instead (`adaptive_calibration`): its
steps drafted fewer tokens after poor acceptance, so its histogram is not a full draft's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import TypeAdapter, ValidationError

from simulator.decoders import lookahead, speculative
from simulator.decoders.acceptance import AcceptanceDistribution, AcceptanceMixture
from simulator.decoders.adaptive_calibration import AdaptiveMeasurement, measure_adaptive
from simulator.stored_runs import stored_run
from workbench.errors import WorkbenchError
from workbench.metrics.decode_emissions import DecodeEmissions, decode_emissions
from workbench.scenario.decoders import DecoderConfig, SpeculativeDecoderConfig

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore

FIELD = "decoder.calibrate_from"
CALIBRATABLE = ("speculative", "lookahead")


@dataclass(frozen=True)
class Calibration:
    run_id: str  # the full id of the run measured
    # A fixed draft's run: (K + 1,) int64, steps by tokens emitted beyond the first.
    accepted_counts: np.ndarray | None = None
    # An adaptive draft's run: per-position rates, pooled and by request type.
    adaptive: AdaptiveMeasurement | None = None

    def distribution(self, k: int) -> AcceptanceDistribution:
        """Tokens a full draft of k (room for k more) accepts beyond its first."""
        if self.accepted_counts is not None:
            return AcceptanceDistribution.histogram(self.accepted_counts, k)
        assert self.adaptive is not None
        self._check_drafted(k)
        return AcceptanceDistribution.positional(self.adaptive.rates.tolist(), k, FIELD)

    def mixture(self, k: int) -> AcceptanceMixture | None:
        """An adaptive run's request types, each a full draft of k (None from a fixed draft's
        run, whose histogram is drawn for every step alike)."""
        if self.adaptive is None:
            return None
        self._check_drafted(k)
        types = tuple(
            AcceptanceDistribution.positional(rates.tolist(), k, FIELD)
            for rates in self.adaptive.type_rates
        )
        first = AcceptanceDistribution.positional(self.adaptive.first_rates.tolist(), k, FIELD)
        return AcceptanceMixture(self.adaptive.type_weights, types, first)

    def _check_drafted(self, k: int) -> None:
        """An adaptive run's rates reach as far as its k."""
        assert self.adaptive is not None
        drafted = len(self.adaptive.rates)
        if k > drafted:
            raise WorkbenchError(
                f"run {self.run_id} drafted at most {drafted} tokens; it cannot calibrate "
                f"{k} drafted positions",
                field=FIELD,
            )

    def info(self) -> dict[str, str]:
        """Facts for the simulated run's info: the run, and what was measured on it."""
        if self.accepted_counts is not None:
            measured = {"calibrated_accepted_counts": self.accepted_counts.tolist()}
        else:
            assert self.adaptive is not None
            measured = {
                "calibrated_acceptance_rates": np.round(self.adaptive.rates, 6).tolist(),
                "calibrated_first_step_rates": np.round(self.adaptive.first_rates, 6).tolist(),
                "calibrated_type_weights": np.round(self.adaptive.type_weights, 6).tolist(),
                "calibrated_type_rates": np.round(self.adaptive.type_rates, 6).tolist(),
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
    emissions = decode_emissions(store.load_records(run["run_id"]))
    if isinstance(decoder, SpeculativeDecoderConfig) and decoder.adaptive is not None:
        k = decoder.num_speculative_tokens
        measured = measure_adaptive(emissions, k, decoder.adaptive, FIELD)
        return Calibration(str(run["run_id"]), adaptive=measured)
    return Calibration(str(run["run_id"]), accepted_counts=_histogram(run, decoder, emissions))


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
