"""Sweeps: a grid over dotted scenario paths, expanded into validated point scenarios."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.scenario.loader import set_dotted, validate_scenario
from workbench.scenario.scenario import Scenario


@dataclass(frozen=True)
class SweepPoint:
    values: dict[str, Any]  # dotted path → value
    scenario: Scenario  # the base scenario with the values applied, sweep removed

    def label(self) -> str:
        return json.dumps(self.values, sort_keys=True)


def expand(scenario: Scenario, *, source: str) -> list[SweepPoint]:
    """All points of the scenario's grid (one point, no values, when it has none)."""
    base = scenario.model_dump(mode="json")
    base["sweep"] = None
    if scenario.sweep is None:
        return [SweepPoint({}, scenario.model_copy(update={"sweep": None}))]
    paths = list(scenario.sweep.grid)
    for dotted in paths:
        if not scenario.sweep.grid[dotted]:
            raise WorkbenchError(
                "expected a non-empty list of values", source=source, field=f"sweep.grid.{dotted}"
            )
    points = []
    for combo in itertools.product(*(scenario.sweep.grid[p] for p in paths)):
        data = json.loads(json.dumps(base))  # deep copy of plain data
        values = dict(zip(paths, combo, strict=True))
        for dotted, value in values.items():
            set_dotted(data, dotted, value, source=source)
        point = validate_scenario(data, source=point_source(source, values), base_dir=Path("/"))
        points.append(SweepPoint(values, point))
    return points


def point_source(source: str, values: dict[str, Any]) -> str:
    """How errors name a sweep point: the scenario file and the point's values."""
    return f"{source} (sweep point {values})" if values else source
