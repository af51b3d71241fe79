"""`calibrate_from` fields: the stored run they name, or a one-line error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.stored_runs import stored_run
from workbench.errors import WorkbenchError
from workbench.store.db import ResultsStore


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
