"""Decode attention that pads every sequence to the batch's longest context (the real
backend's reference kernel): the scheduler knows the longest context, profiles record it,
and the calibrated cost model prices decodes by batch × longest where the engine pads, and
a spread of contexts by a fitted price per batch size where it does not (`spread_share`),
but where the engine pads every row in one call (`one_call_padding`): its padding as keys,
and past that rule what its groups cost (`grouped_padding`)."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from calibration_helpers import grid_works, points_of, profile, store_profile, truth
from hypothesis import given
from hypothesis import strategies as st

from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import (
    CalibratedCostModel,
    fit_profile,
    pads_decode_attention,
    step_work,
)
from simulator.cost_models.calibrated_fit import (
    Curve,
    grouped_padding,
    padded_query_keys,
    spread_share,
)
from workbench.scheduling.decode_set import DecodeSet
from workbench.scheduling.sequence import Sequence
from workbench.store import ResultsStore
from workbench.store.profiles import Profile, read_csv_profile


def padded_truth() -> CalibratedCostModel:
    return CalibratedCostModel(dataclasses.replace(truth().fit, padded_decode=True))


def uneven_works() -> list[StepWork]:
    """The grid, its decodes given uneven contexts: the longest 1–3× the mean."""
    works = []
    for i, work in enumerate(grid_works()):
        batch = work.decode_batch_size
        if batch > 1 and not work.decode_extra_tokens:
            mean = work.decode_context_sum // batch
            work = dataclasses.replace(work, decode_context_max=mean * (1 + i % 3))
        elif batch:
            work = dataclasses.replace(work, decode_context_max=work.decode_context_sum // batch)
        works.append(work)
    return works


def padded_profile_points() -> tuple[list, list[float]]:
    works = uneven_works()
    seconds = [padded_truth().step_time_s(w) for w in works]
    return points_of(works, seconds), seconds


def padded_profile_info() -> dict[str, str]:
    return {"kernels": "reference", "decode_attention": "padded"}


def test_a_padded_profile_is_fitted_back_exactly_and_an_unpadded_fit_finds_its_padding() -> None:
    points, seconds = padded_profile_points()
    prof = dataclasses.replace(profile(), info=padded_profile_info())
    assert pads_decode_attention(prof) and not pads_decode_attention(profile())
    fitted = CalibratedCostModel(fit_profile(points, prof))
    predicted = np.array([fitted.step_time_s(step_work(p)) for p in points])
    np.testing.assert_allclose(predicted, seconds, rtol=1e-9)
    assert "p_pad" not in fitted.fit.terms  # its keys are B · L already
    # Padding every row is the limit of padding some: a padded key at a key's price.
    unpadded = fit_profile(points, profile())
    assert unpadded.pad_price == pytest.approx(truth().fit.terms["a_decode"], rel=1e-6)


# s(B): a full spread's price by batch size, rising fastest where groups start to be cut.
SPREAD = Curve(np.array([2.0, 4.0, 8.0, 16.0]), 1e-3 * np.array([0.4, 0.6, 2.0, 3.0]))


def spread_truth(scale: float = 1.0) -> CalibratedCostModel:
    """The exact truth with a spread of contexts priced `scale` × SPREAD."""
    fit = truth().fit
    curve = Curve(SPREAD.knots, scale * SPREAD.values)
    return CalibratedCostModel(
        dataclasses.replace(fit, curves=fit.curves | {"spread_decode": curve})
    )


def test_the_spread_is_zero_for_equal_contexts_and_below_one() -> None:
    def spread(batch: int, context_sum: int, context_max: int) -> float:
        return float(spread_share(batch, np.array([context_sum]), np.array([context_max]))[0])

    assert spread(8, 800, 100) == spread(8, 800, 0) == spread(1, 300, 300) == 0.0
    assert spread(8, 800, 200) == pytest.approx(0.5)  # 1 − 800 / 1600
    assert spread(8, 800, 200) < spread(8, 800, 10_000) < 1.0


def test_the_spread_price_is_fitted_back_by_batch_and_held_past_the_largest_measured() -> None:
    works = uneven_works()
    seconds = [spread_truth().step_time_s(w) for w in works]
    fitted = fit_profile(points_of(works, seconds), profile())
    for batch in (2, 3, 4, 6, 8, 12, 16):
        assert fitted.spread_s("decode", batch) == pytest.approx(
            spread_truth().fit.spread_s("decode", batch), rel=1e-6
        )
    assert fitted.spread_s("decode", 64) == fitted.spread_s("decode", 16)  # not extrapolated
    even = grid_works()  # every decode batch of equal contexts: nothing to price
    even_seconds = [truth().step_time_s(w) for w in even]
    assert "spread_decode" not in fit_profile(points_of(even, even_seconds), profile()).curves


def test_a_slight_spread_is_priced_but_places_no_knot() -> None:
    works = [
        dataclasses.replace(w, decode_context_max=w.decode_context_sum // w.decode_batch_size + 1)
        if w.decode_batch_size > 8 and not w.decode_extra_tokens
        else w
        for w in uneven_works()
    ]  # batches over 8: longest just above the mean, G ≈ 0.005
    seconds = [spread_truth().step_time_s(w) for w in works]
    fitted = fit_profile(points_of(works, seconds), profile())
    assert fitted.curves["spread_decode"].knots[-1] == 8.0


def spread_from(smallest: int) -> list[StepWork]:
    """The uneven works with a spread only at batches of `smallest` sequences or more."""
    return [
        dataclasses.replace(w, decode_context_max=w.decode_context_sum // w.decode_batch_size)
        if 1 < w.decode_batch_size < smallest
        else w
        for w in uneven_works()
    ]


def test_below_the_smallest_batch_measured_with_a_spread_its_price_falls_to_zero() -> None:
    works = spread_from(8)  # as a grid whose uneven probes run 8 and 16 sequences
    fitted = fit_profile(points_of(works, [spread_truth().step_time_s(w) for w in works]))
    at_8 = spread_truth().fit.spread_s("decode", 8)
    assert fitted.spread_s("decode", 8) == pytest.approx(at_8, rel=1e-6)
    assert fitted.spread_s("decode", 1) == 0.0  # one sequence has no spread
    for batch in (2, 4):  # a straight line from 0 at one sequence, not the price at 8
        assert fitted.spread_s("decode", batch) == pytest.approx(at_8 * (batch - 1) / 7)


def test_a_batch_seen_with_a_spread_in_a_few_steps_places_no_knot() -> None:
    """A probe's last step, its batch shrunk to 3: one step sets no price of its own."""
    works = spread_from(8)
    seconds = [spread_truth().step_time_s(w) for w in works]
    last = StepWork(decode_batch_size=3, decode_context_sum=600, decode_context_max=400)
    fitted = fit_profile(points_of([*works, last], [*seconds, truth().step_time_s(last) + 2e-3]))
    assert list(fitted.curves["spread_decode"].knots) == [1.0, 8.0, 16.0]
    at_3 = fitted.spread_s("decode", 3)
    assert at_3 == pytest.approx(fitted.spread_s("decode", 8) * 2 / 7)  # on the line
    assert at_3 < 1e-3  # where the step alone, 2 ms over at G = 0.5, would set 4 ms


def test_a_spread_seen_in_a_few_steps_only_is_not_priced() -> None:
    works = grid_works()
    rare = [StepWork(decode_batch_size=3, decode_context_sum=600, decode_context_max=400)] * 3
    seconds = [truth().step_time_s(w) for w in works] + [2e-3] * 3
    assert "spread_decode" not in fit_profile(points_of([*works, *rare], seconds)).curves


def uneven_verifications(width: int, batches: tuple[int, ...]) -> list[StepWork]:
    """Verifications of `width` extra tokens a sequence over contexts of mean 200, the
    longest 1.2–3× the mean."""
    works = []
    for batch in batches:
        for longest in (240, 300, 400, 500, 600):
            sums = batch * 200
            works.append(
                StepWork(
                    decode_batch_size=batch, decode_context_sum=sums, decode_context_max=longest,
                    decode_extra_tokens=batch * width, decode_extra_context_sum=width * sums,
                )
            )  # fmt: skip
    return works


def test_the_padding_of_a_spread_is_priced_per_query_of_a_row() -> None:
    """Fitted on decodes (one query a row) and verifications of 4 extra tokens, the price
    holds for a lookahead-like verification of 30: its padding costs 31 queries a key."""
    model = spread_truth()
    model.fit.terms["p_pad"] = 5e-8
    works = uneven_works() + uneven_verifications(4, (2, 4, 8, 16)) * 2
    fitted = CalibratedCostModel(
        fit_profile(points_of(works, [model.step_time_s(w) for w in works]))
    )
    assert fitted.fit.pad_price == pytest.approx(5e-8, rel=1e-6)
    for wide in uneven_verifications(30, (3,)):
        assert fitted.step_time_s(wide) == pytest.approx(model.step_time_s(wide), rel=1e-6)
        even = dataclasses.replace(wide, decode_context_max=200)
        padding = 31 * (3 * wide.decode_context_max - 600)
        assert model.step_time_s(wide) - model.step_time_s(even) == pytest.approx(
            5e-8 * padding
            + model.fit.spread_s("verify", 3) * (1 - 600 / (3 * wide.decode_context_max))
        )


# Padded query-keys under which the engine pads every row in one call (the grouped
# attention's call overhead): an arbitrary threshold (a model of 8 heads × 32 records 1,024).
ONE_CALL = 800.0


def one_call_truth() -> CalibratedCostModel:
    model = spread_truth()
    model.fit.terms["p_pad"] = 5e-8
    return CalibratedCostModel(dataclasses.replace(model.fit, one_call_padding=ONE_CALL))


def test_a_step_padded_in_one_call_pays_its_padding_as_keys_a_cut_one_its_groups() -> None:
    model = one_call_truth()
    key = model.fit.terms["a_decode"]
    even = StepWork(decode_batch_size=8, decode_context_sum=8 * 40, decode_context_max=40)
    for longest, one_call in ((80, True), (139, True), (140, False), (400, False)):
        uneven = dataclasses.replace(even, decode_context_max=longest)
        padding = 8 * (longest - 40)  # P = B · L − S: 792 keys at 139, 800 at 140
        grouped = 2 * math.sqrt(padding * ONE_CALL) - ONE_CALL  # no s(B): the rule prices it
        cut = key * ONE_CALL + 5e-8 * (grouped - ONE_CALL)  # T as keys, the groups' growth
        extra = model.step_time_s(uneven) - model.step_time_s(even)
        assert extra == pytest.approx(key * padding if one_call else cut)
    # Continuous at the threshold: one more padded key a row, eight keys' price more.
    below, at = (dataclasses.replace(even, decode_context_max=n) for n in (139, 140))
    assert model.step_time_s(at) - model.step_time_s(below) == pytest.approx(key * 8)
    # A verification of one extra token a row pads both queries: Q = 2 · P, at its own a.
    drafts = {"decode_extra_tokens": 8, "decode_extra_context_sum": 8 * 41}
    even_verify = dataclasses.replace(even, **drafts)
    uneven_verify = dataclasses.replace(even_verify, decode_context_max=100)
    padding = 2 * 8 * (100 - 40)  # 960 ≥ ONE_CALL: cut
    grouped = 2 * math.sqrt(padding * ONE_CALL) - ONE_CALL
    cut = model.fit.terms["a_verify"] * ONE_CALL + 5e-8 * (grouped - ONE_CALL)
    extra = model.step_time_s(uneven_verify) - model.step_time_s(even_verify)
    assert extra == pytest.approx(cut)


@given(st.floats(1.0, 1e6), st.floats(1.0, 1e7))
def test_grouped_padding_is_the_cheapest_cut_of_evenly_spread_contexts(
    one_call: float, padding: float
) -> None:
    """(g − 1) more calls of T each and Q / g padding left: its least over g ≥ 1 (T · Q / T
    = Q at the threshold, where one call pays Q; nothing below it is cut)."""
    cuts = np.linspace(1.0, max(1.0, 4 * math.sqrt(padding / one_call)), 20_001)
    least = ((cuts - 1.0) * one_call + padding / cuts).min()
    expected = least if padding >= one_call else one_call
    assert float(grouped_padding(padding, one_call)) == pytest.approx(expected, rel=1e-6)


def one_call_works() -> list[StepWork]:
    """Uneven decodes and verifications of one extra token a row, each side of ONE_CALL."""
    works = []
    for batch, mean in itertools.product((2, 4, 8, 16), (20, 40, 300, 500)):
        for longest in (mean, mean + 5, 3 * mean // 2, 2 * mean, 5 * mean // 2, 3 * mean):
            context = StepWork(
                decode_batch_size=batch, decode_context_sum=batch * mean, decode_context_max=longest
            )
            extra = {"decode_extra_tokens": batch, "decode_extra_context_sum": batch * mean}
            works += [context, dataclasses.replace(context, **extra)]
    return works


def test_the_fit_prices_steps_each_side_of_the_one_call_padding_and_finds_the_truth() -> None:
    model = one_call_truth()
    works = grid_works() + one_call_works()
    assert {_padding(w) < ONE_CALL for w in works if _padding(w) > 0} == {True, False}
    seconds = [model.step_time_s(w) for w in works]
    fitted = CalibratedCostModel(fit_profile(points_of(works, seconds), one_call_profile()))
    assert fitted.fit.one_call_padding == ONE_CALL
    np.testing.assert_allclose([fitted.step_time_s(w) for w in works], seconds, rtol=1e-6)
    assert fitted.fit.pad_price == pytest.approx(5e-8, rel=1e-6)
    assert not {"spread_decode", "spread_verify"} & set(fitted.fit.curves)  # no s(B) to fit
    # Fitted as if every step could be cut, the same points price short ones dearer.
    as_before = CalibratedCostModel(fit_profile(points_of(works, seconds), profile()))
    assert as_before.fit.one_call_padding == 0.0
    short = [w for w in works if 0 < _padding(w) < ONE_CALL]
    assert max(as_before.step_time_s(w) / model.step_time_s(w) for w in short) > 1.01


def one_call_profile() -> Profile:
    return dataclasses.replace(profile(), info={"one_call_padding": ONE_CALL})


def _padding(work: StepWork) -> float:
    if not work.decode_batch_size:
        return 0.0
    sums, maxes = np.array([work.decode_context_sum]), np.array([work.decode_context_max])
    extra = work.decode_extra_tokens
    return float(padded_query_keys(work.decode_batch_size, sums, maxes, extra)[0])


@pytest.mark.parametrize("context_max", [0, 90, 300, 3000])
@pytest.mark.parametrize("one_call", [0.0, ONE_CALL])
def test_a_spread_priced_decode_span_equals_its_steps_bit_for_bit(
    context_max: int, one_call: float
) -> None:
    fit = spread_truth().fit
    terms = fit.terms | {"p_pad": 5e-8}
    model = CalibratedCostModel(dataclasses.replace(fit, one_call_padding=one_call, terms=terms))
    span = model.decode_span_s(3, 270, 40, context_max)
    for i, value in enumerate(span):
        work = StepWork(
            decode_batch_size=3,
            decode_context_sum=270 + i * 3,
            decode_context_max=context_max + i if context_max else 0,
        )
        assert value == model.step_time_s(work)
    if context_max > 90:  # longer than the mean: a spread, priced on top of the sum
        assert span[0] > truth().decode_span_s(3, 270, 1, context_max)[0]


def test_padding_prices_the_longest_context_and_never_less_than_the_sum() -> None:
    model = padded_truth()
    even = StepWork(decode_batch_size=4, decode_context_sum=400, decode_context_max=100)
    uneven = dataclasses.replace(even, decode_context_max=250)
    unknown = dataclasses.replace(even, decode_context_max=0)
    assert model.step_time_s(even) == model.step_time_s(unknown) == truth().step_time_s(even)
    assert model.step_time_s(uneven) == pytest.approx(
        truth().step_time_s(even) + truth().fit.terms["a_decode"] * (4 * 250 - 400)
    )


@pytest.mark.parametrize("context_max", [0, 90, 300])
def test_a_padded_decode_span_equals_its_steps_bit_for_bit(context_max: int) -> None:
    model = padded_truth()
    batch, context_sum, n = 3, 270, 40
    span = model.decode_span_s(batch, context_sum, n, context_max)
    for i, value in enumerate(span):
        work = StepWork(
            decode_batch_size=batch,
            decode_context_sum=context_sum + i * batch,
            decode_context_max=context_max + i if context_max else 0,
        )
        assert value == model.step_time_s(work)


def test_the_decode_set_knows_its_longest_member_through_joins_advances_and_leaves() -> None:
    rng = np.random.default_rng(7)
    members = DecodeSet(block_size=16, lookahead_slots=2)
    live: dict[int, Sequence] = {}
    step = 0
    for request_id in range(400):
        action = rng.integers(3)
        if action == 0 or not live:
            prompt = int(rng.integers(1, 300))
            seq = Sequence(request_id, 0.0, prompt_tokens=prompt, output_tokens=900)
            seq.computed = seq.prompt_tokens
            members.add(seq, step)
            live[request_id] = seq
        elif action == 1:
            seq = live[int(rng.choice(list(live)))]
            members.advance(seq, step, extra=int(rng.integers(1, 4)))
        else:
            members.remove(live.pop(int(rng.choice(list(live)))), step)
        step += int(rng.integers(0, 3))
        for seq in live.values():
            members.sync(seq, step)
        longest = max((seq.computed + 1 for seq in live.values()), default=0)
        assert members.context_max(step) == longest


def test_profiles_keep_the_longest_context_in_the_database_and_the_csv(tmp_path: Path) -> None:
    points, _ = padded_profile_points()
    prof = dataclasses.replace(profile(), info=padded_profile_info())
    with ResultsStore.open(tmp_path / "p.duckdb") as store:
        stored = store_profile(store, prof, points)
        assert store.profile_points(stored.profile_id) == points
        store.export_profile_csv(stored.profile_id, tmp_path / "p.csv")
    read, csv_points = read_csv_profile(tmp_path / "p.csv")
    assert csv_points == points and pads_decode_attention(read)


def test_a_profile_csv_from_before_the_longest_context_reads_as_unknown(tmp_path: Path) -> None:
    points, _ = padded_profile_points()
    with ResultsStore.open(tmp_path / "p.duckdb") as store:
        stored = store_profile(store, profile(), points)
        store.export_profile_csv(stored.profile_id, tmp_path / "p.csv")
    with (tmp_path / "p.csv").open(newline="") as new, (tmp_path / "old.csv").open("w") as old:
        rows = list(csv.DictReader(new))
        kept = [name for name in rows[0] if name != "decode_context_max"]
        writer = csv.DictWriter(old, kept, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    _, old_points = read_csv_profile(tmp_path / "old.csv")
    assert [p.decode_context_max for p in old_points] == [0] * len(points)
