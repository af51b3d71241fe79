"""A calibrated speculative twin prices the draft model's forwards by the draft's own profile
(`cost_model.draft_profile`), or says how else: never the target's profile, never silently
the roofline."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from calibration_helpers import (
    TINY_DRAFT_SHAPE,
    TINY_SHAPE,
    grid_works,
    points_of,
    profile,
    store_profile,
    tiny_config,
    truth,
)
from pydantic import ValidationError
from scenario_helpers import SCENARIOS

from simulator.catalogs.models import ModelSpec, model_from_hf_config
from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import (
    CalibratedCostModel,
    Preferences,
    calibrated_config_for,
    latest_profile,
    with_draft_profile,
)
from simulator.cost_models.factory import build_cost_model
from simulator.cost_models.roofline import RooflineCostModel
from simulator.decoders.draft_cost import draft_cost_model
from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import VanillaDecoderConfig
from workbench.scenario.loader import load_scenario
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import CalibratedCostConfig
from workbench.store.db import ResultsStore
from workbench.store.profiles import Profile

DRAFT_SPEED = 0.25  # the draft's steps cost this much of the target's


@pytest.fixture
def store() -> Iterator[ResultsStore]:
    """A target profile and a draft profile, each of its own shape."""
    with ResultsStore.open(":memory:") as db:
        works = grid_works()
        seconds = [truth().step_time_s(w) for w in works]
        store_profile(db, profile("target"), points_of(works, seconds))
        draft_seconds = [DRAFT_SPEED * s for s in seconds]
        store_profile(db, profile("draft", shape=TINY_DRAFT_SHAPE), points_of(works, draft_seconds))
        yield db


def scenario(tmp_path: Path, cost: str) -> Scenario:
    target = tiny_config(tmp_path / "target")
    draft = tiny_config(tmp_path / "draft", TINY_DRAFT_SHAPE)
    return load_scenario(
        SCENARIOS / "speculative_sim.yaml",
        [
            f"model={{name: tiny, config_path: {target}, dtype: fp32}}",
            "hardware={gpu: cpu}",
            f"decoder.draft={{config_path: {draft}}}",
            f"cost_model={cost}",
            "workload.lengths_from_trace=null",
            "workload.prompt_tokens={kind: fixed, value: 10}",
            "workload.output_tokens={kind: fixed, value: 40}",
            "workload.num_requests=20",
            "scheduler.kv_cache.num_blocks=256",
        ],
    )


def draft_shape(tmp_path: Path) -> ModelSpec:
    return model_from_hf_config(tiny_config(tmp_path / "draft", TINY_DRAFT_SHAPE), name="draft")


def test_the_draft_is_priced_by_its_profiles_forward_times(
    tmp_path: Path, store: ResultsStore
) -> None:
    cost = "{kind: calibrated, profile: target, draft_profile: draft}"
    model = draft_cost_model(scenario(tmp_path, cost), draft_shape(tmp_path), store)
    assert isinstance(model, CalibratedCostModel)
    for batch in (1, 4, 16):
        work = StepWork(decode_batch_size=batch, decode_context_sum=batch * 64)
        # points_of measures each forward at 0.9 of its step: the draft runs inside a step
        expected = 0.9 * DRAFT_SPEED * truth().step_time_s(work)
        assert model.step_time_s(work) == pytest.approx(expected, rel=0.03)


def test_the_draft_s_own_price_scale_scales_the_draft_alone(
    tmp_path: Path, store: ResultsStore
) -> None:
    both = "{kind: calibrated, profile: target, draft_profile: draft, price_scale: 1.5"
    apart = scenario(tmp_path, both + ", draft_price_scale: 0.5}")
    alike = scenario(tmp_path, both + "}")
    work = StepWork(decode_batch_size=4, decode_context_sum=256)
    drafts = [draft_cost_model(s, draft_shape(tmp_path), store) for s in (apart, alike)]
    assert drafts[0].step_time_s(work) == pytest.approx(drafts[1].step_time_s(work) / 3)
    targets = [build_cost_model(s, store) for s in (apart, alike)]
    assert targets[0].step_time_s(work) == targets[1].step_time_s(work)


def test_without_a_draft_price_a_calibrated_scenario_is_refused(
    tmp_path: Path, store: ResultsStore
) -> None:
    unpriced = scenario(tmp_path, "{kind: calibrated, profile: target}")
    with pytest.raises(WorkbenchError, match=r"cost_model\.draft_profile: .*draft_roofline") as e:
        simulate(unpriced, store=store)
    assert "\n" not in str(e.value)


def test_an_unknown_draft_profile_is_named_as_such(tmp_path: Path, store: ResultsStore) -> None:
    unknown = scenario(tmp_path, "{kind: calibrated, profile: target, draft_profile: nope}")
    with pytest.raises(WorkbenchError, match=r"cost_model\.draft_profile: no calibration profile"):
        simulate(unknown, store=store)


def test_a_draft_profile_of_another_shape_is_refused(tmp_path: Path, store: ResultsStore) -> None:
    wrong = scenario(tmp_path, "{kind: calibrated, profile: target, draft_profile: target}")
    with pytest.raises(WorkbenchError, match=r"cost_model\.draft_profile: .*another model"):
        simulate(wrong, store=store)


def test_a_draft_profile_without_verification_widths_is_refused(
    tmp_path: Path, store: ResultsStore
) -> None:
    """A draft's catch-up forwards (a step's bonus and last draft) run as verifications."""
    works = [w for w in grid_works() if not w.decode_extra_tokens]
    seconds = [DRAFT_SPEED * truth().step_time_s(w) for w in works]
    store_profile(store, profile("no-verify", shape=TINY_DRAFT_SHAPE), points_of(works, seconds))
    cost = "{kind: calibrated, profile: target, draft_profile: no-verify}"
    with pytest.raises(WorkbenchError, match=r"cost_model\.draft_profile: .*measured no verify"):
        simulate(scenario(tmp_path, cost), store=store)


def unrevised(name: str, shape: dict[str, int]) -> Profile:
    """A profile as grids before the verify revision measured it (nothing recorded)."""
    old = profile(name, shape=shape)
    return dataclasses.replace(
        old, info={k: v for k, v in old.info.items() if k != "verify_revision"}
    )


def test_profiles_measuring_verification_the_old_way_are_refused(
    tmp_path: Path, store: ResultsStore
) -> None:
    works = grid_works()
    seconds = [truth().step_time_s(w) for w in works]
    store_profile(store, unrevised("old-target", TINY_SHAPE), points_of(works, seconds))
    store_profile(store, unrevised("old-draft", TINY_DRAFT_SHAPE), points_of(works, seconds))
    for cost, field in (
        ("{kind: calibrated, profile: old-target, draft_profile: draft}", "profile"),
        ("{kind: calibrated, profile: target, draft_profile: old-draft}", "draft_profile"),
    ):
        with pytest.raises(WorkbenchError) as e:
            simulate(scenario(tmp_path, cost), store=store)
        text = str(e.value)
        assert f"cost_model.{field}: profile 'old-" in text and "\n" not in text
        assert "(verify revision 0, this workbench's is 1)" in text
        assert "`workbench calibrate --model tiny --device cpu --dtype fp32 --db FILE`" in text
    # A vanilla run verifies nothing: the old profile still prices it.
    vanilla = scenario(tmp_path, "{kind: calibrated, profile: old-target}")
    simulate(
        vanilla.model_copy(update={"decoder": VanillaDecoderConfig(kind="vanilla")}), store=store
    )


def test_the_roofline_only_when_asked(tmp_path: Path, store: ResultsStore) -> None:
    roofline = scenario(tmp_path, "{kind: calibrated, profile: target, draft_roofline: true}")
    model = draft_cost_model(roofline, draft_shape(tmp_path), store)
    assert isinstance(model, RooflineCostModel)


def test_one_way_of_pricing_the_draft_at_most() -> None:
    with pytest.raises(ValidationError, match="at most one of draft_profile"):
        CalibratedCostConfig(kind="calibrated", profile="p", draft_profile="d", draft_roofline=True)


def test_the_draft_s_forwards_lengthen_each_step(tmp_path: Path, store: ResultsStore) -> None:
    """A draft twice as slow lengthens each decode step by the draft's forwards: k = 4 is a
    catch-up forward (one or two tokens) and three single-token ones, at batch 1 (mostly, here:
    a request ends before the next arrives)."""
    works = grid_works()
    slower = [2 * DRAFT_SPEED * truth().step_time_s(w) for w in works]
    store_profile(store, profile("slow-draft", shape=TINY_DRAFT_SHAPE), points_of(works, slower))
    mean_decode_s = {}
    for name in ("draft", "slow-draft"):
        cost = f"{{kind: calibrated, profile: target, draft_profile: {name}}}"
        steps = simulate(scenario(tmp_path, cost), store=store).steps
        alone = (steps.decode_tokens == 1) & (steps.prefill_tokens == 0)
        assert alone.sum() > 0.9 * (steps.decode_tokens > 0).sum()
        mean_decode_s[name] = float(np.mean(steps.duration_s[alone]))
    model = draft_cost_model(
        scenario(tmp_path, "{kind: calibrated, profile: target, draft_profile: draft}"),
        draft_shape(tmp_path),
        store,
    )
    single = model.step_time_s(StepWork(decode_batch_size=1, decode_context_sum=30))
    added = mean_decode_s["slow-draft"] - mean_decode_s["draft"]  # the draft's own time
    assert 2.7 * single < added < 6 * single


def test_each_step_records_the_draft_s_share(tmp_path: Path, store: ResultsStore) -> None:
    """A simulated step records its draft's priced forwards: twice as slow a draft doubles
    them and leaves the rest of the step (the target's share) as it was."""
    works = grid_works()
    slower = [2 * DRAFT_SPEED * truth().step_time_s(w) for w in works]
    store_profile(store, profile("slow-draft", shape=TINY_DRAFT_SHAPE), points_of(works, slower))
    draft_s, target_s = {}, {}
    for name in ("draft", "slow-draft"):
        cost = f"{{kind: calibrated, profile: target, draft_profile: {name}}}"
        steps = simulate(scenario(tmp_path, cost), store=store).steps
        drafting = steps.drafted_tokens > 0
        assert (steps.draft_s[drafting] > 0).all()
        assert (steps.draft_s[~drafting] == 0).all()
        alone = drafting & (steps.decode_tokens == 1) & (steps.prefill_tokens == 0)
        draft_s[name] = float(np.mean(steps.draft_s[alone]))
        target_s[name] = float(np.mean(steps.duration_s[alone] - steps.draft_s[alone]))
    assert draft_s["slow-draft"] == pytest.approx(2 * draft_s["draft"], rel=0.05)
    assert target_s["slow-draft"] == pytest.approx(target_s["draft"], rel=0.05)


def test_a_twin_finds_the_draft_s_latest_profile(tmp_path: Path, store: ResultsStore) -> None:
    twin = scenario(tmp_path, "{kind: calibrated, profile: target}")
    cost = twin.cost_model
    assert isinstance(cost, CalibratedCostConfig)
    draft = (draft_shape(tmp_path), tmp_path / "draft")
    found = with_draft_profile(cost, twin, draft, store, Preferences())
    assert found.draft_profile == store.find_profile("draft").profile_id
    works = grid_works()
    later = profile("draft-again", shape=TINY_DRAFT_SHAPE)
    later.created_at, later.threads = later.created_at + 60, 4  # newer, on other threads
    store_profile(store, later, points_of(works, [1e-3] * len(works)))
    newest = with_draft_profile(cost, twin, draft, store, Preferences())
    assert newest.draft_profile == store.find_profile("draft-again").profile_id
    on_two_threads = Preferences(machine=("test CPU", 2))  # this machine's first
    chosen = with_draft_profile(cost, twin, draft, store, on_two_threads)
    assert chosen.draft_profile == store.find_profile("draft").profile_id
    asked = cost.model_copy(update={"draft_roofline": True})
    assert with_draft_profile(asked, twin, draft, store, Preferences()) == asked


def test_a_verifying_twin_prefers_a_profile_whose_verifications_count(
    tmp_path: Path, store: ResultsStore
) -> None:
    """On this machine a current profile wins over a newer old-revision one (which would be
    refused); a vanilla twin keeps taking the newest; another machine's current profile does
    not beat this machine's old one (refused here, the refusal says to calibrate again)."""
    twin = scenario(tmp_path, "{kind: calibrated, profile: target}")
    cost = twin.cost_model
    assert isinstance(cost, CalibratedCostConfig)
    works = grid_works()
    old = unrevised("draft-old", TINY_DRAFT_SHAPE)
    old.created_at += 60  # newer than the fixture's current "draft", on the same machine
    store_profile(store, old, points_of(works, [1e-3] * len(works)))
    here = Preferences(machine=("test CPU", 2))
    draft = (draft_shape(tmp_path), tmp_path / "draft")
    chosen = with_draft_profile(cost, twin, draft, store, here)
    assert chosen.draft_profile == store.find_profile("draft").profile_id
    spec = model_from_hf_config(tiny_config(tmp_path / "draft", TINY_DRAFT_SHAPE), name="d")
    vanilla = twin.model_copy(update={"decoder": VanillaDecoderConfig(kind="vanilla")})
    assert latest_profile(store, spec, vanilla, here) == store.find_profile("draft-old")
    on_four = dataclasses.replace(old, name="draft-old-4", profile_id="old4", threads=4)
    store_profile(store, on_four, points_of(works, [1e-3] * len(works)))
    chosen = with_draft_profile(cost, twin, draft, store, Preferences(machine=("test CPU", 4)))
    assert chosen.draft_profile == "old4"


def test_a_twin_without_a_draft_profile_says_how_to_measure_one(tmp_path: Path) -> None:
    with ResultsStore.open(":memory:") as empty:
        twin = scenario(tmp_path, "{kind: calibrated, profile: target}")
        assert isinstance(twin.cost_model, CalibratedCostConfig)
        draft = (draft_shape(tmp_path), tmp_path / "draft")
        with pytest.raises(
            WorkbenchError, match=r"workbench calibrate --model .*draft --device cpu"
        ):
            with_draft_profile(twin.cost_model, twin, draft, empty, Preferences())


def test_naming_the_target_s_profile_keeps_the_draft_s(tmp_path: Path, store: ResultsStore) -> None:
    own = "{kind: calibrated, profile: old, draft_profile: draft, price_scale: 1.5}"
    cost = calibrated_config_for(scenario(tmp_path, own), store, "target")
    assert (cost.profile, cost.draft_profile, cost.price_scale) == ("target", "draft", 1.5)
