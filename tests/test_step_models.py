"""Decoder step models: acceptance distributions, caps, draft shapes."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.decoders.lookahead import lookahead_step_model
from simulator.decoders.lookahead_candidates import CandidatesByPosition
from simulator.decoders.speculative import draft_shape, speculative_step_model
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import LookaheadDecoderConfig, SpeculativeDecoderConfig

DRAWS = 200_000


def draws(dist: AcceptanceDistribution, cap: int = 1_000, seed: int = 0) -> np.ndarray:
    return dist.sample(np.random.default_rng(seed), np.full(DRAWS, cap))


@pytest.mark.parametrize(("rate", "k"), [(0.7, 4), (0.3, 8), (0.95, 2)])
def test_iid_mean_accepted_is_the_sum_of_powers(rate: float, k: int) -> None:
    expected = sum(rate**i for i in range(1, k + 1))
    dist = AcceptanceDistribution.iid(rate, k)
    assert dist.mean == pytest.approx(expected)
    assert draws(dist).mean() == pytest.approx(expected, abs=0.01)
    assert dist.probabilities.sum() == pytest.approx(1.0)


def test_positional_rates_give_products_of_survival() -> None:
    rates = [0.9, 0.8, 0.5]
    sample = draws(AcceptanceDistribution.positional(rates, 3, "f"))
    for i, expected in enumerate(np.cumprod(rates), start=1):
        assert (sample >= i).mean() == pytest.approx(expected, abs=0.005)


def test_too_few_positional_rates_name_the_field() -> None:
    with pytest.raises(WorkbenchError, match=r"decoder\.acceptance\.rates"):
        AcceptanceDistribution.positional([0.9, 0.8], 4, "decoder.acceptance.rates")


def test_histogram_counts_beyond_k_fold_into_k() -> None:
    dist = AcceptanceDistribution.histogram([1, 1, 1, 1, 4], 2)
    assert np.allclose(dist.probabilities, [0.125, 0.125, 0.75])


def test_draws_never_exceed_their_caps() -> None:
    dist = AcceptanceDistribution.iid(0.99, 8)
    caps = np.random.default_rng(1).integers(0, 10, DRAWS)
    sample = dist.sample(np.random.default_rng(2), caps)
    assert (sample <= caps).all() and (sample <= 8).all()
    assert (sample[caps == 0] == 0).all()
    assert (sample == np.minimum(caps, 8)).mean() > 0.9  # α near 1: mostly the cap


def test_extremes_accept_all_or_nothing() -> None:
    assert (draws(AcceptanceDistribution.iid(1.0, 5)) == 5).all()
    assert (draws(AcceptanceDistribution.iid(0.0, 5)) == 0).all()


def test_chain_verifies_k_drafts_unless_the_room_is_smaller() -> None:
    cfg = SpeculativeDecoderConfig(kind="speculative", num_speculative_tokens=4)
    model = speculative_step_model(cfg)
    caps = np.array([0, 1, 3, 4, 50])
    assert model.extra_tokens(caps).tolist() == [0, 1, 3, 4, 4]
    assert model.draft_forwards(caps).tolist() == [0, 1, 3, 4, 4]


def test_tree_shapes_match_the_configured_node_counts() -> None:
    static = SpeculativeDecoderConfig(
        kind="speculative", tree={"kind": "static", "branching": [2, 2, 1, 1]}
    )
    assert draft_shape(static).tolist() == [0, 2, 6, 10, 14]
    assert draft_shape(static)[-1] == static.max_draft_tokens
    dynamic = SpeculativeDecoderConfig(
        kind="speculative", tree={"kind": "dynamic", "max_nodes": 10, "top_k": 4, "max_depth": 6}
    )
    assert draft_shape(dynamic).tolist() == [0, 4, 8, 10]  # 3 levels fill 10 nodes
    model = speculative_step_model(static)
    assert model.draft_forwards(np.array([1, 9])).tolist() == [1, 4]  # one per level


def test_lookahead_computes_its_whole_window_and_accepts_at_most_n_minus_1() -> None:
    cfg = LookaheadDecoderConfig(
        kind="lookahead", window=3, ngram=3, candidates=2,
        tokens_per_step={"kind": "histogram", "counts": [1, 1, 1, 1, 1]},
    )  # fmt: skip
    model = lookahead_step_model(cfg)
    assert model.acceptance.max_accepted == 2
    assert model.extra_tokens(np.array([0, 1, 7])).tolist() == [9, 9, 9]  # 3·2 + 2·2 − 1
    assert model.drafted_tokens(np.array([0, 7])).tolist() == [4, 4]  # the 2 candidate 3-grams
    assert not model.drafts_with_model


def test_lookahead_without_a_histogram_names_the_field() -> None:
    cfg = LookaheadDecoderConfig(kind="lookahead")
    with pytest.raises(WorkbenchError, match=r"decoder\.tokens_per_step"):
        lookahead_step_model(cfg)


def test_calibrated_candidates_are_fed_by_output_position_on_average() -> None:
    cfg = LookaheadDecoderConfig(
        kind="lookahead", window=3, ngram=3, candidates=2,
        tokens_per_step={"kind": "histogram", "counts": [1, 1, 1]},
    )  # fmt: skip
    by_position = CandidatesByPosition(np.array([0, 10]), np.array([0.3, 1.5]), tail=2)
    model = lookahead_step_model(cfg, candidates=by_position)
    rng = np.random.default_rng(0)
    caps, early, late = np.full(20_000, 5), np.full(20_000, 4), np.full(20_000, 10)
    extra = model.extra_tokens(caps, rng, early)  # the window's 3 · 2 − 1, and 0.3 2-grams
    assert set(extra.tolist()) == {5, 7} and extra.mean() == pytest.approx(5.6, abs=0.02)
    drafted = model.drafted_tokens(caps, model.extra_tokens(caps, rng, late))
    assert set(drafted.tolist()) == {2, 4} and drafted.mean() == pytest.approx(3.0, abs=0.03)
    near_end = model.extra_tokens(np.array([0, 1, 1, 1]), rng, np.full(4, 10))  # cut to room
    assert near_end[0] == 5 and set(near_end[1:].tolist()) <= {6, 7}  # 1 or 2 tokens of 1
    with pytest.raises(ValueError, match="generator"):
        model.extra_tokens(caps)
    full = CandidatesByPosition(np.array([0]), np.array([9.0]), tail=2)  # beyond a full pool
    capped = lookahead_step_model(cfg, candidates=full)
    assert capped.extra_tokens(caps[:3], rng, early[:3]).tolist() == [9, 9, 9]
