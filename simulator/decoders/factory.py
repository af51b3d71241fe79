"""Build each replica's multi-token stepper from the scenario's decoder section."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.catalogs.models import ModelSpec
from simulator.cost_models.base import CostModel
from simulator.decoders import lookahead, speculative
from simulator.decoders.apar import AparBranches
from simulator.decoders.apar_calibration import stored_trees
from simulator.decoders.apar_trees import request_trees
from simulator.decoders.calibration import Calibration, calibrate
from simulator.decoders.draft_cost import DraftCache, draft_cost_model, draft_model_spec
from simulator.decoders.lookahead import lookahead_step_model
from simulator.decoders.speculative import speculative_step_model
from simulator.decoders.step_model import StepModel
from simulator.decoders.stepper import MultiTokenStepper
from workbench.scenario.decoders import (
    AparDecoderConfig,
    LookaheadDecoderConfig,
    SpeculativeDecoderConfig,
    draft_field,
)
from workbench.scenario.scenario import Scenario
from workbench.scheduling.adaptive_draft import AdaptiveDraftLength
from workbench.seeding import component_rng

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore


def multi_token(decoder: object) -> SpeculativeDecoderConfig | LookaheadDecoderConfig | None:
    """The multi-token decoder a config steps with: its own, or APAR's speculation (whose
    branches speculate like any sequence), else None."""
    if isinstance(decoder, AparDecoderConfig):
        return decoder.speculative_config()
    if isinstance(decoder, SpeculativeDecoderConfig | LookaheadDecoderConfig):
        return decoder
    return None


def draft_spec(scenario: Scenario) -> ModelSpec | None:
    """The speculative draft's shape (it shares the replica's memory), else None."""
    decoder = multi_token(scenario.decoder)
    if not isinstance(decoder, SpeculativeDecoderConfig):
        return None
    return draft_model_spec(decoder, draft_field(scenario.decoder))


def build_steppers(
    scenario: Scenario,
    replicas: int,
    store: ResultsStore | None,
    apar: AparBranches | None = None,
) -> tuple[list[MultiTokenStepper | None], dict[str, str]]:
    """One stepper per replica (None each for vanilla decoding) and facts for the run's
    info: which run a calibrated histogram came from, and the histogram. With `apar`, a
    speculating branch's draws stop at its next fork."""
    decoder = multi_token(scenario.decoder)
    if decoder is None:
        return [None] * replicas, {}
    calibration, info = None, {}
    if decoder.calibrate_from is not None:
        calibration = calibrate(store, decoder.calibrate_from)
    model = _step_model(decoder, calibration)
    if calibration is not None:
        info = calibration.info()
    limit = None if apar is None else apar.extra_before_fork
    draft = _draft_cost(scenario, store)  # one price list; each replica its own draft cache
    steppers: list[MultiTokenStepper | None] = [
        MultiTokenStepper(
            model,
            _replica_rng(scenario.draw_seed(), i),
            None if draft is None else DraftCache(draft),
            limit,
            _adaptive(decoder),
        )
        for i in range(replicas)
    ]
    return steppers, info


def build_apar(
    scenario: Scenario,
    output_tokens: np.ndarray,
    store: ResultsStore | None,
    swap_block_s: float = 0.0,
) -> tuple[AparBranches | None, dict[str, str]]:
    """The requests' APAR trees (None for other decoders), and facts for the run's info.
    swap_block_s: what moving one KV block to or from host memory costs."""
    decoder = scenario.decoder
    if not isinstance(decoder, AparDecoderConfig):
        return None, {}
    replayed, info = None, {}
    if decoder.calibrate_from is not None:
        run_id, replayed = stored_trees(store, decoder.calibrate_from)
        info = {"calibrated_from": run_id, "replayed_trees": str(len(replayed))}
    rng = component_rng(scenario.draw_seed(), "decoder.apar.trees")
    trees = request_trees(decoder, output_tokens, rng, replayed)
    return AparBranches(trees, swap_block_s), info


def _step_model(
    decoder: SpeculativeDecoderConfig | LookaheadDecoderConfig, calibration: Calibration | None
) -> StepModel:
    if isinstance(decoder, SpeculativeDecoderConfig):
        k = speculative.max_accepted_tokens(decoder)
        if calibration is None:
            return speculative_step_model(decoder)
        mixture = calibration.mixture(k)
        return speculative_step_model(decoder, calibration.distribution(k), mixture)
    k = lookahead.max_accepted_tokens(decoder)
    if calibration is None:
        return lookahead_step_model(decoder)
    distribution, by_position = calibration.distribution(k), calibration.by_position(k)
    candidates = calibration.candidates_by_position(decoder.ngram - 1)
    return lookahead_step_model(decoder, distribution, candidates, by_position)


def _draft_cost(scenario: Scenario, store: ResultsStore | None) -> CostModel | None:
    spec = draft_spec(scenario)
    return None if spec is None else draft_cost_model(scenario, spec, store)


def _adaptive(
    decoder: SpeculativeDecoderConfig | LookaheadDecoderConfig,
) -> AdaptiveDraftLength | None:
    """A replica's per-sequence draft lengths, when the decoder adapts k."""
    if not isinstance(decoder, SpeculativeDecoderConfig) or decoder.adaptive is None:
        return None
    return AdaptiveDraftLength(decoder.num_speculative_tokens, decoder.adaptive)


def _replica_rng(seed: int, replica: int) -> np.random.Generator:
    """Each replica draws from its own stream: a replica's draws depend only on the order
    of its own steps, never on how the others interleave with it."""
    return component_rng(seed, f"decoder.step_model.replica{replica}")
