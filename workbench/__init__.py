"""Decoding workbench: benchmark and plan LLM inference on a simulator and real models.

From Python (results as polars DataFrames, see `workbench.api` and docs/results.md):

    import workbench as wb
    run = wb.run(wb.load_scenario("scenarios/quickstart.yaml"), db="runs.duckdb")
    wb.open("runs.duckdb").summary()

The names below load `workbench.api` on first use, so `import workbench` (and the CLI)
stays light: no polars, no simulator, no torch until they are needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.api import Results, Run, Sweep, load_scenario, open, run, run_sweep

# Not `sweep`: that name is the `workbench.sweep` module (grid expansion).
__all__ = ["Results", "Run", "Sweep", "load_scenario", "open", "run", "run_sweep"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from workbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
