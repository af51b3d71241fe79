"""What the real backend refuses in a scenario before it loads anything: light to import
(no torch), so `workbench validate` and a sweep's preflight run it too."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.scenario.scenario import Scenario


def check_real_scenario(scenario: Scenario) -> None:
    """One replica on one device, and weights to load."""
    for field in ("replicas", "tensor_parallel"):
        if getattr(scenario.hardware, field) != 1:
            raise WorkbenchError(
                "the real backend serves one replica on one device: expected 1",
                field=f"hardware.{field}",
            )
    checkpoint_folder(scenario)


def checkpoint_folder(scenario: Scenario) -> Path:
    path = scenario.model.config_path
    if path is None:
        raise WorkbenchError(
            "the real backend needs weights: give model.zoo or model.config_path (a checkpoint "
            "folder)",
            field="model",
        )
    return path if path.is_dir() else path.parent
