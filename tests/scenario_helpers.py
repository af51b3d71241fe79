"""Shared helpers: load shipped scenarios with overrides, compare records exactly."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np

from workbench.records import RunRecords
from workbench.scenario.loader import load_scenario
from workbench.scenario.scenario import Scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def quickstart(*overrides: str) -> Scenario:
    return load_scenario(SCENARIOS / "quickstart.yaml", list(overrides))


def step_by_step(scenario: Scenario) -> Scenario:
    return scenario.model_copy(
        update={"simulator": scenario.simulator.model_copy(update={"bulk_steps": False})}
    )


def assert_records_identical(a: RunRecords, b: RunRecords) -> None:
    """Every column of every table equal, bit for bit (NaN equal to NaN)."""
    for table in ("requests", "steps", "emissions"):
        left, right = getattr(a, table), getattr(b, table)
        for f in fields(left):
            x, y = getattr(left, f.name), getattr(right, f.name)
            equal_nan = x.dtype.kind == "f"
            assert np.array_equal(x, y, equal_nan=equal_nan), f"{table}.{f.name} differs"
