"""Where zoo models live on disk (no torch: the simulator reads their config.json too)."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError

DEFAULT_ZOO_DIR = Path.home() / ".cache" / "decoding-workbench" / "zoo"


def zoo_model_dir(name: str, role: str = "target", cache_dir: Path | None = None) -> Path:
    """The checkpoint folder of zoo model `name`'s target or draft, built or not."""
    return (cache_dir or DEFAULT_ZOO_DIR) / name / role


def require_zoo_model(name: str, role: str = "target", cache_dir: Path | None = None) -> Path:
    folder = zoo_model_dir(name, role, cache_dir)
    if not (folder / "config.json").is_file():
        raise WorkbenchError(
            f"zoo model {name!r} ({role}) is not built in {folder.parent}; "
            f"build it with `workbench zoo build {name}`",
            field="model.zoo",
        )
    return folder
