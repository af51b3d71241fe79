"""Run a scenario (every sweep point of it) on a backend and store each run whole."""

from __future__ import annotations

import importlib.metadata
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.metrics import summarize
from workbench.records import RunMeta, RunRecords
from workbench.scenario.decoders import SpeculativeDecoderConfig
from workbench.scenario.scenario import Scenario
from workbench.store.db import ResultsStore
from workbench.sweep import SweepPoint, expand, point_source

ProgressFactory = Callable[[int, str], Callable[[int], None] | None]  # (total, label) → update


@dataclass
class RunOutcome:
    run_id: str | None  # None when the point was already in the database (skipped)
    point: SweepPoint
    summary: dict[str, Any] | None


def run_scenario(
    scenario: Scenario,
    store: ResultsStore,
    *,
    source: str,
    progress: ProgressFactory | None = None,
) -> list[RunOutcome]:
    """Run each point not yet complete in `store`; an interrupted sweep resumes.

    Errors the backends raise without a file (unknown GPU, weights that do not fit...)
    name `source`, the scenario file, and the sweep point.
    """
    points = expand(scenario, source=source)
    done = store.completed_hashes()
    outcomes = []
    for point in points:
        if point.values and point.scenario.config_hash() in done:
            outcomes.append(RunOutcome(None, point, None))
            continue
        try:
            outcomes.append(run_point(point, store, progress=progress))
        except WorkbenchError as error:
            raise error.with_source(point_source(source, point.values)) from None
    return outcomes


def run_point(
    point: SweepPoint, store: ResultsStore, *, progress: ProgressFactory | None = None
) -> RunOutcome:
    scenario = point.scenario
    update = progress(scenario.workload.num_requests, scenario.name) if progress else None
    started = time.time()
    records = run_backend(scenario, update, store)
    records.info.setdefault("scheduler", scenario.scheduler.kind)  # selects summary metrics
    records.info.setdefault("decoder", scenario.decoder.kind)
    meta = RunMeta(
        run_id=uuid.uuid4().hex[:12],
        scenario_name=scenario.name,
        scenario_hash=scenario.config_hash(),
        config_json=scenario.config_json(),
        backend=scenario.backend,
        decoder=scenario.decoder.kind,
        scheduler=scenario.scheduler.kind,
        seed=scenario.seed,
        versions=package_versions(),
        git_sha=git_sha(),
        started_at=started,
        finished_at=time.time(),
        sweep_point=point.label() if point.values else None,
    )
    store.write_run(meta, records)
    return RunOutcome(meta.run_id, point, summarize(records, scenario.slo))


def run_backend(
    scenario: Scenario,
    progress: Callable[[int], None] | None,
    store: ResultsStore | None = None,
) -> RunRecords:
    """Dispatch to a backend; imported lazily so the light path never imports torch.

    store: the results database, where the simulator finds a run to calibrate from."""
    scenario = with_model_source(scenario)
    if scenario.backend == "sim":
        from simulator.run import simulate

        return simulate(scenario, progress=progress, store=store)
    try:
        from real_backend.serve import serve_scenario
    except ImportError as exc:
        raise WorkbenchError(
            f"the real backend needs the `real` extra ({exc.name} is missing): "
            "pip install -e '.[real]' -c constraints.txt",
            field="backend",
        ) from None
    return serve_scenario(scenario, progress=progress)


def with_model_source(scenario: Scenario) -> Scenario:
    """Point `model.config_path` (and a speculative draft's) at zoo checkpoint folders."""
    model = scenario.model
    if model.zoo is not None:
        folder = _zoo_folder(model.zoo, "target", model.zoo_dir, "model.zoo")
        model = model.model_copy(update={"config_path": folder})
    decoder = scenario.decoder
    if isinstance(decoder, SpeculativeDecoderConfig) and decoder.draft.config_path is None:
        pair = decoder.draft.zoo or (scenario.model.zoo if decoder.draft.name is None else None)
        if pair is not None:
            folder = _zoo_folder(pair, "draft", model.zoo_dir, "decoder.draft.zoo")
            draft = decoder.draft.model_copy(update={"config_path": folder})
            decoder = decoder.model_copy(update={"draft": draft})
    return scenario.model_copy(update={"model": model, "decoder": decoder})


def _zoo_folder(name: str, role: str, zoo_dir: str | None, field: str) -> Path:
    from real_backend.zoo.build import resolve_zoo_model  # path logic only: no torch

    cache = Path(zoo_dir).expanduser() if zoo_dir else None
    try:
        return resolve_zoo_model(name, role, cache)
    except WorkbenchError as exc:
        raise WorkbenchError(exc.detail, field=field) from None


def package_versions() -> dict[str, str]:
    names = ["decoding-workbench", "numpy", "simpy", "duckdb", "pydantic", "torch"]
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_sha() -> str | None:
    """The workbench checkout's commit, when it runs from one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
