"""What an APAR fork costs beyond its rows: the calibration's fork steps, their column in
the store, the fit's two fork terms and the refusal of a profile that measured none."""

from __future__ import annotations

from csv import DictReader, DictWriter
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest
from calibration_helpers import fork_works, grid_works, points_of, profile, store_profile, truth
from scenario_helpers import SCENARIOS

from simulator.cost_models.calibrated import (
    CalibratedCostModel,
    check_kinds,
    fit_profile,
    step_work,
)
from simulator.cost_models.calibrated_fit import fit_step_costs
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.store import ResultsStore
from workbench.store.profiles import read_csv_profile


def _points(works: list) -> list:
    known = truth()
    return points_of(works, [known.step_time_s(w) for w in works])


def test_the_fit_prices_the_first_fork_of_a_step_and_each_fork() -> None:
    points = _points(grid_works() + fork_works())
    fitted = CalibratedCostModel(fit_profile(points))
    for term in ("f_step", "f_fork", "f_key"):
        assert fitted.fit.terms[term] == pytest.approx(truth().fit.terms[term], rel=1e-6)
    measured = np.array([p.step_s for p in points])
    predicted = np.array([fitted.step_time_s(step_work(p)) for p in points])
    np.testing.assert_allclose(predicted, measured, rtol=1e-9)
    forks = [p for p in points if p.decode_forks]
    assert len(forks) == 24 and {p.kind for p in forks} == {"fork"}


def test_a_step_with_forks_costs_its_rows_and_the_forks_terms() -> None:
    model = truth()
    works = fork_works()
    one, three = (w for w in works if w.decode_context_sum == 8 * 120 and w.decode_forks in (1, 3))
    assert one.decode_context_max == 140
    rows = {w.decode_forks: replace(w, decode_forks=0) for w in (one, three)}  # rows alone
    terms = model.fit.terms
    keys = terms["f_key"] * 8 * 120  # every decode row padded to a fork chunk's two queries
    beyond = {f: terms["f_step"] + f * terms["f_fork"] + keys for f in (1, 3)}
    assert model.step_time_s(one) == pytest.approx(model.step_time_s(rows[1]) + beyond[1])
    assert model.step_time_s(three) == pytest.approx(model.step_time_s(rows[3]) + beyond[3])
    # An engine whose decode attention pads to the longest reads B · L keys twice instead.
    padded = CalibratedCostModel(replace(model.fit, padded_decode=True))
    extra = padded.step_time_s(one) - padded.step_time_s(replace(one, decode_forks=0))
    assert extra == pytest.approx(terms["f_step"] + terms["f_fork"] + terms["f_key"] * 8 * 140)


def test_a_padding_engines_fork_keys_are_fitted_as_it_reads_them() -> None:
    padded = CalibratedCostModel(replace(truth().fit, padded_decode=True))
    works = grid_works() + fork_works()
    fit = fit_step_costs(works, [padded.step_time_s(w) for w in works], padded_decode=True)
    assert fit.terms["f_key"] == pytest.approx(truth().fit.terms["f_key"], rel=1e-6)


def test_a_forking_apar_twin_needs_a_profile_that_measured_forks() -> None:
    without = fit_profile(_points(grid_works()))
    assert "f_fork" not in without.terms
    apar = load_scenario(SCENARIOS / "apar_sim.yaml")
    with pytest.raises(WorkbenchError, match="measured no APAR forks") as refused:
        check_kinds(without, apar, "p.duckdb")
    assert "\n" not in str(refused.value) and "workbench calibrate" in str(refused.value)
    banned = load_scenario(SCENARIOS / "apar_sim.yaml", ["decoder.max_branches=1"])
    check_kinds(without, banned, "p.duckdb")  # nothing forks: no fork price needed
    check_kinds(fit_profile(_points(grid_works() + fork_works())), apar, "p.duckdb")


def test_fork_counts_round_trip_through_the_store_and_csv(tmp_path: Path) -> None:
    points = _points(fork_works())
    with ResultsStore.open(tmp_path / "p.duckdb") as store:
        stored = store_profile(store, profile(), points)
        assert store.profile_points(stored.profile_id) == points
        csv = store.export_profile_csv(stored.profile_id, tmp_path / "p.csv")
    assert read_csv_profile(csv)[1] == points
    assert sorted({p.decode_forks for p in points}) == [0, 1, 2, 3]


def test_a_csv_exported_before_schema_12_reads_no_forks(tmp_path: Path) -> None:
    with ResultsStore.open(tmp_path / "p.duckdb") as store:
        stored = store_profile(store, profile(), _points(fork_works()))
        csv = store.export_profile_csv(stored.profile_id, tmp_path / "p.csv")
    with csv.open(newline="") as new:
        rows = list(DictReader(new))
    with (tmp_path / "old.csv").open("w", newline="") as old:
        writer = DictWriter(old, [name for name in rows[0] if name != "decode_forks"])
        writer.writeheader()
        writer.writerows({k: v for k, v in row.items() if k != "decode_forks"} for row in rows)
    points = read_csv_profile(tmp_path / "old.csv")[1]
    assert len(points) == len(rows) and {p.decode_forks for p in points} == {0}
    assert {row["decode_forks"] for row in rows} == {"0", "1", "2", "3"}  # what it dropped


def test_profiles_before_schema_12_read_no_forks(tmp_path: Path) -> None:
    path = tmp_path / "v11.duckdb"
    points = _points(fork_works())
    with ResultsStore.open(path) as store:
        stored = store_profile(store, profile(), points)
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE profile_points DROP COLUMN decode_forks")
    con.execute("UPDATE schema_version SET version = 11")
    con.close()
    with ResultsStore.open(path, read_only=True) as old:
        assert {p.decode_forks for p in old.profile_points(stored.profile_id)} == {0}
    with ResultsStore.open(path) as upgraded:  # migrated: the column back, old points at 0
        store_profile(upgraded, profile("new"), points)
        new = upgraded.find_profile("new")
        assert upgraded.profile_points(new.profile_id) == points
        assert {p.decode_forks for p in upgraded.profile_points(stored.profile_id)} == {0}


def test_the_fork_probe_bans_the_models_forks_and_forks_where_apar_may() -> None:
    pytest.importorskip("torch")
    from real_backend.calibration.fork_probe import CuedForkRules
    from real_backend.decoders.apar import ForkTokens

    rules = CuedForkRules(ForkTokens(fork=3, child=4), max_depth=2, max_branches=2)
    assert rules.banned(0, 7, room=20) == [4, 3]  # the model's own forks: never
    assert rules.may_fork(0, 7, room=20)
    assert not rules.may_fork(0, 3, room=20)  # right after a fork token
    assert not rules.may_fork(0, 7, room=2)  # no room for the parent's next and the child's
    rules.forked(0, 9)
    assert not rules.may_fork(0, 7, room=20)  # the request has its two live branches
    rules.ended(9)
    assert rules.may_fork(0, 7, room=20) and not rules.may_fork(9, 7, room=20)  # depth 2
    rules.banned(5, 7, room=2)  # a root never cued is still known: it ends and is forgotten
    rules.ended(5)
    rules.forget(5)


@pytest.mark.parametrize(("together", "with_the_first"), [(1, [0]), (2, [0, 1])])
def test_roots_fork_on_cue_together_or_one_a_step(together: int, with_the_first: list) -> None:
    """Every 8 tokens each root may still emit, offset by its index over `together`: request
    i is cued at 8 - i // together tokens left (mod 8), while there is room to fork."""
    torch = pytest.importorskip("torch")
    from real_backend.calibration.fork_probe import CuedForkProbe
    from real_backend.decoders.apar import ForkTokens
    from real_backend.decoders.base import DecodeRequest

    probe = CuedForkProbe(None, None, ForkTokens(3, 4), 8, 4, together)  # type: ignore[arg-type]
    at = {rid: [left for left in range(20, 0, -1) if probe._cued(
        DecodeRequest(rid, [7], left, torch.Generator()))] for rid in range(3)}  # fmt: skip
    assert [rid for rid in at if at[rid] == [16, 8]] == with_the_first
    assert at[len(with_the_first)] == [15, 7]  # the next ones a step later


def test_a_model_forks_in_calibration_only_with_both_tokens(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import json

    from real_backend.calibration.measure import apar_tokens
    from real_backend.decoders.apar import ForkTokens

    assert apar_tokens(tmp_path) is None  # no tokenizer.json: not an APAR model
    tokenizer = tmp_path / "tokenizer.json"
    added = [{"content": "[Fork]", "id": 7}]
    tokenizer.write_text(json.dumps({"added_tokens": added}))
    assert apar_tokens(tmp_path) is None  # the fork token without the child token
    added.append({"content": "[Child]", "id": 8})
    tokenizer.write_text(json.dumps({"added_tokens": added}))
    assert apar_tokens(tmp_path) == ForkTokens(7, 8)
    for unreadable in ("{not json", "[1, 2]", json.dumps({"added_tokens": [{"id": 3}]})):
        tokenizer.write_text(unreadable)  # not "no forks": an error, in one line
        with pytest.raises(WorkbenchError, match="unreadable added_tokens") as error:
            apar_tokens(tmp_path)
        assert "\n" not in str(error.value) and str(tokenizer) in str(error.value)
