"""`decoder.calibrate_from`: a step model's distribution measured on a stored run.

The run's decode emissions (`workbench.metrics.decode_emissions`: the prefill's emission of each
request left out) give tokens per sequence and decode step. Emissions a sequence's output
length capped (room below the run's decoder headroom K: k drafts, a tree's depth, N − 1 for
lookahead) are left out too, so the histogram is the decoder's own, uncapped: the simulator
caps its draws again near each sequence's end. Index i of the result counts steps that
emitted i tokens beyond the first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import TypeAdapter, ValidationError

from simulator.decoders import lookahead, speculative
from simulator.stored_runs import stored_run
from workbench.errors import WorkbenchError
from workbench.metrics.decode_emissions import decode_emissions
from workbench.scenario.decoders import DecoderConfig, SpeculativeDecoderConfig

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore

FIELD = "decoder.calibrate_from"
CALIBRATABLE = ("speculative", "lookahead")


@dataclass(frozen=True)
class Calibration:
    run_id: str  # the full id of the run measured
    accepted_counts: np.ndarray  # (K + 1,) int64: steps by tokens emitted beyond the first


def calibrate(store: ResultsStore | None, run_ref: str) -> Calibration:
    """The tokens-per-step histogram of run `run_ref` (an id or unique prefix) in `store`."""
    store, run = stored_run(store, run_ref, FIELD, f"calibrating from run {run_ref!r}")
    if run["decoder"] not in CALIBRATABLE:
        raise WorkbenchError(
            f"run {run['run_id']} used the {run['decoder']} decoder; calibrate from a "
            "speculative or lookahead run",
            field=FIELD,
        )
    headroom = _headroom(run)
    histogram = decode_emissions(store.load_records(run["run_id"])).histogram(headroom)
    accepted = histogram[1:]  # index = tokens beyond the first
    if accepted.sum() == 0:
        raise WorkbenchError(
            f"run {run['run_id']} has no decode step with room for {headroom} more tokens "
            "to calibrate from (outputs too short?)",
            field=FIELD,
        )
    return Calibration(str(run["run_id"]), accepted)


def _headroom(run: dict) -> int:
    """Most tokens beyond the first a step of the run's decoder could emit."""
    try:
        section = json.loads(run["config_json"])["decoder"]
        decoder = TypeAdapter(DecoderConfig).validate_python(section)
    except (KeyError, TypeError, ValueError, ValidationError):
        raise WorkbenchError(
            f"run {run['run_id']} has no readable decoder configuration", field=FIELD
        ) from None
    if isinstance(decoder, SpeculativeDecoderConfig):
        return speculative.max_accepted_tokens(decoder)
    return lookahead.max_accepted_tokens(decoder)  # type: ignore[arg-type]
