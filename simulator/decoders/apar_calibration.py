"""`decoder.calibrate_from` for APAR: the request trees of a stored real run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.stored_runs import stored_run
from workbench.apar_trees import BranchTree
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore

FIELD = "decoder.calibrate_from"


def stored_trees(store: ResultsStore | None, run_ref: str) -> tuple[str, list[BranchTree]]:
    """(the run's full id, its finished requests' trees in request order)."""
    store, run = stored_run(store, run_ref, FIELD, f"replaying run {run_ref!r}'s trees")
    records = store.load_records(run["run_id"])
    if run["decoder"] != "apar" or records.branches is None:
        raise WorkbenchError(
            f"run {run['run_id']} used the {run['decoder']} decoder and has no branch trees; "
            "replay an APAR run",
            field=FIELD,
        )
    finished = set(records.requests.request_id[records.requests.status == "finished"].tolist())
    trees = [tree for rid, tree in sorted(records.branches.trees().items()) if rid in finished]
    if not trees:
        raise WorkbenchError(f"run {run['run_id']} finished no request", field=FIELD)
    return str(run["run_id"]), trees
