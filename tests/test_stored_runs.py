"""`calibrate_from` fields: the stored run they name, or a one-line error naming the field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from simulator.stored_runs import stored_run
from workbench.cli import main
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scenario.scenario import Scenario
from workbench.store import ids
from workbench.store.db import ResultsStore
from workbench.store.ids import new_id
from workbench.store.profiles import Profile

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_without_a_database_the_error_says_to_run_with_one() -> None:
    with pytest.raises(WorkbenchError) as info:
        stored_run(None, "ab12", "decoder.calibrate_from", "calibrating from run 'ab12'")
    message = str(info.value)
    assert "decoder.calibrate_from" in message and "--db FILE" in message
    assert message.count("\n") == 0


def test_an_unknown_run_names_the_database_and_the_field(tmp_path: Path) -> None:
    with ResultsStore.open(tmp_path / "r.duckdb") as store, pytest.raises(WorkbenchError) as info:
        stored_run(store, "ffff", "decoder.calibrate_from", "calibrating from run 'ffff'")
    message = str(info.value)
    assert "no run with id or prefix 'ffff'" in message
    assert str(tmp_path / "r.duckdb") in message and "decoder.calibrate_from" in message


def test_a_new_id_begins_with_a_letter_so_every_prefix_reads_back_as_text() -> None:
    draws = iter(["190660135082", "012345670123", "0b1010101010", "9abcdef01234", "c0ffee012345"])
    fresh = new_id(lambda: next(draws))
    assert fresh == "c0ffee012345"
    assert all(isinstance(yaml.safe_load(fresh[:n]), str) for n in range(1, len(fresh) + 1))


@pytest.mark.parametrize(
    ("dotted", "read"),
    [
        ("decoder.calibrate_from", lambda s: s.decoder.calibrate_from),
        ("cost_model.profile", lambda s: s.cost_model.profile),
    ],
)
def test_an_id_of_digits_only_written_unquoted_is_read_as_its_digits(
    dotted: str, read: Callable[[Scenario], object]
) -> None:
    """A run stored before ids held a letter keeps a digits-only id; YAML reads it as a number."""
    overrides = [f"{dotted}=190660135082"]
    if dotted.startswith("cost_model"):
        overrides.insert(0, "cost_model={kind: calibrated}")
    scenario = load_scenario(SCENARIOS / "apar_sim.yaml", overrides)
    assert read(scenario) == "190660135082"


def test_a_boolean_is_no_stored_id() -> None:
    with pytest.raises(WorkbenchError, match=r"decoder\.calibrate_from"):
        load_scenario(SCENARIOS / "apar_sim.yaml", ["decoder.calibrate_from=true"])


def test_runs_and_profiles_take_their_ids_from_new_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draws = iter(["012345670123", "abcdef012345", "0b1010101010", "fedcba543210"])
    monkeypatch.setattr(ids, "_random_hex", lambda: next(draws))
    db = tmp_path / "r.duckdb"
    small = ["--set", "workload.num_requests=20"]
    assert main(["run", str(SCENARIOS / "quickstart.yaml"), "--db", str(db), *small]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        assert [run["run_id"] for run in store.list_runs()] == ["abcdef012345"]
    profile = Profile("p", "m", "c", {}, "cpu", "cpu", "fp32", 1, "test", 1)
    assert profile.profile_id == "fedcba543210"
