"""The stored real run a scenario's `calibrate_from` names (a step model's histogram, a
pipeline's timings, APAR's request trees), with one-line errors that name the field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore


def stored_run(
    store: ResultsStore | None, run_ref: str, field: str, use: str
) -> tuple[ResultsStore, dict[str, Any]]:
    """`store`, known to be there, and the row of its run `run_ref` (an id or unique prefix;
    `ResultsStore.get_run`). `use` opens the error when there is no database ("calibrating
    from run 'ab12'")."""
    if store is None:
        raise WorkbenchError(
            f"{use} needs its results database: run the scenario with "
            "`workbench run ... --db FILE`",
            field=field,
        )
    try:
        return store, store.get_run(run_ref)
    except WorkbenchError as error:
        raise WorkbenchError(f"{error.detail} in {store.path}", field=field) from None
