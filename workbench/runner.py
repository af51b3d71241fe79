"""Run a scenario (every sweep point of it) on a backend and store each run whole."""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from workbench.errors import WorkbenchError, needs_real_extra
from workbench.metrics import DEFAULT_PERCENTILES, SummaryValue, summarize
from workbench.records import DraftForwards, RunMeta, RunRecords
from workbench.scenario.decoders import draft_field, draft_of, with_draft
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import CalibratedCostConfig
from workbench.store.db import ResultsStore
from workbench.store.ids import new_id
from workbench.sweep import SweepPoint, expand, point_source

if TYPE_CHECKING:
    from real_backend.calibration.drift import DriftProbe
    from simulator.cost_models.calibrated import Preferences
    from workbench.store.profiles import Profile, ProfilePoint


class Progress(Protocol):
    """A progress display for one run (a tqdm bar is one)."""

    def update(self, n: int) -> object: ...

    def close(self) -> None: ...


ProgressFactory = Callable[[int, str], Progress | None]  # (total, label) → display


@dataclass
class RunOutcome:
    """One sweep point's run: written now, or found complete in the database (skipped)."""

    run_id: str  # the run written, or the complete run a skipped point already has
    point: SweepPoint
    summary: dict[str, SummaryValue]  # at the requested percentiles
    index: int = 1  # the point's position in the sweep, from 1
    total: int = 1  # points in the sweep
    skipped: bool = False
    wall_s: float | None = None  # wall-clock time of the run (None when skipped)
    label: str | None = None
    earlier_runs: list[str] = field(default_factory=list)  # same configuration, stored before
    served_steps: list[ProfilePoint] | None = None  # a real run's steps, when measured
    served_drafts: list[DraftForwards] | None = None  # and their draft forwards


OutcomeHandler = Callable[[RunOutcome], None]


def run_scenario(
    scenario: Scenario,
    store: ResultsStore,
    *,
    source: str,
    progress: ProgressFactory | None = None,
    on_outcome: OutcomeHandler | None = None,
    label: str | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
) -> list[RunOutcome]:
    """Run each point not yet complete in `store`; an interrupted sweep resumes.

    on_outcome: called as each point finishes (or is skipped), so results show at once.
    label: stored with each run, to tell apart runs of one configuration.
    Errors the backends raise without a file (unknown GPU, weights that do not fit...)
    name `source`, the scenario file, and the sweep point; with several points to run, every
    point's refusals (`preflight`) come before any runs.
    """
    points = expand(scenario, source=source)
    done = store.completed_runs_by_hash()
    to_run = [p for p in points if not (p.values and done.get(p.scenario.config_hash()))]
    if len(to_run) > 1:  # a refusal of a later point comes before the first point's work
        preflight(to_run, source=source, store=store)
    outcomes = []
    for index, point in enumerate(points, start=1):
        earlier = done.get(point.scenario.config_hash(), [])
        if point.values and earlier:  # a resumed sweep: the point is there already
            summary = store.run_summary(earlier[-1], percentiles)
            outcome = RunOutcome(earlier[-1], point, summary, skipped=True, label=label)
        else:
            with _naming_point(source, point):
                outcome = run_point(
                    point, store, progress=progress, label=label, percentiles=percentiles,
                    position=(index, len(points)),
                )  # fmt: skip
            outcome.earlier_runs = list(earlier)
        outcome.index, outcome.total = index, len(points)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes


@contextmanager
def _naming_point(source: str, point: SweepPoint) -> Iterator[None]:
    """A refusal inside names the scenario file and the sweep point it came from."""
    try:
        yield
    except WorkbenchError as error:
        raise error.with_source(point_source(source, point.values)) from None


def preflight(points: list[SweepPoint], *, source: str, store: ResultsStore | None) -> None:
    """Every refusal `run` would give for these points, without running them: the model,
    hardware, memory and feasibility checks of the simulator; for the real backend, the
    model's folder and the workload."""
    for point in points:
        with _naming_point(source, point):
            _preflight_point(point.scenario, store)


def _preflight_point(scenario: Scenario, store: ResultsStore | None) -> None:
    scenario = with_model_source(scenario)
    if scenario.backend == "sim":
        from simulator.run import check_scenario

        check_scenario(scenario, store)
        return
    from real_backend.preflight import check_real_scenario  # no torch
    from workbench.workload.generate import workload_for

    check_real_scenario(scenario)
    workload_for(scenario)


def run_point(
    point: SweepPoint,
    store: ResultsStore,
    *,
    progress: ProgressFactory | None = None,
    label: str | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    position: tuple[int, int] = (1, 1),
    info: dict[str, str] | None = None,
    measure_steps: bool = False,
) -> RunOutcome:
    """Run one point and store it whole; position: (index from 1, points in the sweep).
    info: entries for the run's info (`--backend both`: `twin_of`, the real run this
    simulated run reproduces, `calibration_repeatability`, `machine_drift` and
    `step_prices`).
    measure_steps: a real run's steps kept in the outcome as calibration points."""
    scenario = point.scenario
    display = (
        progress(scenario.workload.num_requests, _progress_label(point, position))
        if progress
        else None
    )
    started = time.time()
    try:
        records = run_backend(
            scenario, display.update if display else None, store, measure_steps=measure_steps
        )
    finally:
        if display is not None:
            display.close()
    finished = time.time()
    records.info.setdefault("scheduler", scenario.scheduler.kind)  # selects summary metrics
    records.info.setdefault("decoder", scenario.decoder.kind)
    records.info.update(info or {})
    meta = RunMeta(
        run_id=new_id(),
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
        finished_at=finished,
        sweep_point=point.label() if point.values else None,
    )
    stored = summarize(records, scenario.slo)  # the default percentiles: what the store keeps
    store.write_run(meta, records, summary=stored, label=label)
    shown = (
        stored
        if percentiles == DEFAULT_PERCENTILES
        else summarize(records, scenario.slo, percentiles)
    )
    return RunOutcome(
        meta.run_id, point, shown, wall_s=finished - started, label=label,
        served_steps=records.served_steps, served_drafts=records.served_drafts,
    )  # fmt: skip


@dataclass
class TwinOutcome:
    """One sweep point run on both backends: the real run and its simulated twin, and with
    `--speed-matched` the twin again at the real run's measured speed."""

    real: RunOutcome
    sim: RunOutcome
    speed_matched: RunOutcome | None = None


TwinHandler = Callable[[TwinOutcome], None]
PointRunner = Callable[..., RunOutcome]  # run_point with the sweep's settings bound


def run_twins(
    scenario: Scenario,
    store: ResultsStore,
    *,
    source: str,
    profile: str | None = None,
    progress: ProgressFactory | None = None,
    on_outcome: TwinHandler | None = None,
    label: str | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    speed_matched: bool = False,
    twin_draws: int = 1,
) -> list[TwinOutcome]:
    """`workbench run --backend both`: each point on the real backend, then on the
    simulator with a calibrated cost model, stored as a pair (the simulated run's
    `info.twin_of` names the real one). Both see the same KV blocks; the calibration
    profile is checked before the real run starts.

    profile: the profile to price the simulated run with (a name or id in `store`); default
    the scenario's own calibrated cost model, else the latest complete profile of the
    scenario's model, device and dtype.
    speed_matched: also simulate the point with every price scaled to the real run's
    measured speed (`served_price_scale`), stored with `info.speed_matched_twin_of`: a
    diagnostic that reads the machine's speed from the real run, so not the check itself.
    twin_draws: above 1, the twin is also simulated with that many draw seeds (its own, then
    the next ones; not stored) and the spread of its latencies is stored in its
    `info.draw_spread`: the part of its error that is its own sampling."""
    points = expand(scenario, source=source)
    if len(points) > 1:  # every pair's refusals before the first real run
        _preflight_twins(points, store, source, profile)
    outcomes = []
    for index, point in enumerate(points, start=1):
        run = functools.partial(
            run_point, store=store, progress=progress, label=label, percentiles=percentiles,
            position=(index, len(points)),
        )  # fmt: skip
        with _naming_point(source, point):
            outcome = _run_twin(point, store, profile, run, speed_matched, twin_draws)
        for each in (outcome.real, outcome.sim, outcome.speed_matched):
            if each is not None:
                each.index, each.total = index, len(points)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes


def _preflight_twins(
    points: list[SweepPoint], store: ResultsStore, source: str, profile: str | None
) -> None:
    """What each point's pair would refuse (the real run's checks, the twin's profile and
    prepare), before any pair runs."""
    for point in points:
        with _naming_point(source, point):
            real, sim = twin_scenarios(point.scenario, store, profile)
            _preflight_point(real, store)
            _preflight_point(sim, store)


def _run_twin(
    point: SweepPoint,
    store: ResultsStore,
    profile: str | None,
    run: PointRunner,
    speed_matched: bool,
    twin_draws: int = 1,
) -> TwinOutcome:
    real, sim = twin_scenarios(point.scenario, store, profile)
    _preflight_point(sim, store)  # a bad profile fails before the real run
    drift = _drift_probe(sim, store)
    before = drift.measure_or_why() if drift is not None else []
    real_run = run(SweepPoint(point.values, real), measure_steps=True)
    info = {"twin_of": real_run.run_id}
    if drift is not None:
        info["machine_drift"] = drift.describe(before, drift.measure_or_why())
    prices = _step_prices(sim, store, real_run.served_steps or [], real_run.served_drafts or [])
    real_run.served_steps = real_run.served_drafts = None  # priced: a sweep need not keep them
    if prices is not None:
        info["step_prices"] = prices.text
    repeatability = _calibration_repeatability(sim, store)
    if repeatability is not None:
        info["calibration_repeatability"] = repeatability
    if twin_draws > 1:
        info["draw_spread"] = _draw_spread(sim, store, twin_draws)
    sim_run = run(SweepPoint(point.values, sim), info=info)
    matched = None
    if speed_matched and prices is not None and prices.scale is not None:
        matched = run(
            SweepPoint(point.values, _at_price_scale(sim, prices.scale, prices.draft_scale)),
            info={"speed_matched_twin_of": real_run.run_id},
        )
    return TwinOutcome(real_run, sim_run, matched)


def _draw_spread(sim: Scenario, store: ResultsStore, draws: int) -> str:
    """The twin's latency quantiles over `draws` draw seeds (its own, then the next)."""
    from simulator.twin_draws import redrawn, spread_text

    first = sim.draw_seed()
    return spread_text(redrawn(with_model_source(sim), store, range(first, first + draws)))


def _at_price_scale(sim: Scenario, scale: float, draft_scale: float | None) -> Scenario:
    """The twin with every price times `scale`, a draft's times its own `draft_scale` where
    its forwards were priced (four decimals: a tenth of a per mille)."""
    cost = sim.cost_model
    assert isinstance(cost, CalibratedCostConfig)  # twin_scenarios prices every twin so
    draft = None if draft_scale is None else round(draft_scale, 4)
    scaled = cost.model_copy(update={"price_scale": round(scale, 4), "draft_price_scale": draft})
    return sim.model_copy(update={"cost_model": scaled})


def twin_scenarios(
    scenario: Scenario, store: ResultsStore, profile: str | None
) -> tuple[Scenario, Scenario]:
    """The point's real scenario and its simulated twin: the same workload, scheduler and
    KV blocks (the real backend's count when the scenario leaves it open), the twin priced
    by a calibrated cost model (named in both configurations)."""
    with needs_real_extra("--backend both runs the real backend", field="backend"):
        from real_backend.serve import real_kv_blocks  # the real backend is needed anyway
    from simulator.cost_models.calibrated import Preferences, calibrated_config_for
    from workbench.workload.generate import workload_for

    real = scenario.model_copy(update={"backend": "real"})
    resolved = with_model_source(real)  # the zoo's folder; the stored config keeps the name
    kv = real.scheduler.kv_cache
    if kv.num_blocks is None:
        blocks = real_kv_blocks(resolved, workload_for(resolved))
        kv = kv.model_copy(update={"num_blocks": blocks})
        real = real.model_copy(
            update={"scheduler": real.scheduler.model_copy(update={"kv_cache": kv})}
        )
    kernels, linear = _run_kernels(real), _run_linear(real)
    machine = _this_machine(real)
    cost = calibrated_config_for(resolved, store, profile, kernels, machine, linear)
    cost = _with_draft_priced(cost, resolved, store, Preferences(kernels, machine, linear))
    if not cost.allow_other_device:
        for measured in _twin_profiles(cost, store):
            _check_device_name(measured, machine.device_name)
            _check_threads(measured, machine.threads)
            _check_kernels(measured, kernels)
            _check_linear(measured, linear)
    # The real run carries the twin's cost model too (the real backend reads none), so the
    # pair's configurations differ in their backend alone.
    real = real.model_copy(update={"cost_model": cost})
    return real, real.model_copy(update={"backend": "sim"})


def _with_draft_priced(
    cost: CalibratedCostConfig, resolved: Scenario, store: ResultsStore, prefer: Preferences
) -> CalibratedCostConfig:
    """A speculative twin's cost model with its draft's profile (`with_draft_profile`)."""
    from simulator.cost_models.calibrated import with_draft_profile
    from simulator.decoders.factory import draft_spec

    spec = draft_spec(resolved)
    if spec is None:
        return cost
    draft = draft_of(resolved.decoder)
    folder = None if draft is None else draft.config_path
    return with_draft_profile(cost, resolved, (spec, folder), store, prefer)


class TwinProfile(NamedTuple):
    """A profile pricing a twin, where it was read (the database, or an exported CSV, which
    carries the same columns, so the same checks apply) and the scenario field naming it."""

    profile: Profile
    source: str
    field: str

    @property
    def name(self) -> str:
        draft = self.field == "cost_model.draft_profile"
        return "the draft's calibration profile" if draft else "the calibration profile"


def _twin_profiles(cost: CalibratedCostConfig, store: ResultsStore) -> list[TwinProfile]:
    """The profiles pricing the twin: the target's, and a draft's."""
    from simulator.cost_models.calibrated import profile_of

    refs = [
        ("cost_model.profile", cost.profile, cost.profile_csv),
        ("cost_model.draft_profile", cost.draft_profile, cost.draft_profile_csv),
    ]
    return [
        TwinProfile(profile_of(ref, csv, store, field), str(csv or store.path), field)
        for field, ref, csv in refs
        if ref is not None or csv is not None
    ]


def _check_threads(twin: TwinProfile, threads: int) -> None:
    """A CPU profile measured with other intra-op threads prices another machine."""
    measured = twin.profile.threads
    if measured != threads:
        raise WorkbenchError(
            f"{twin.name} was measured with {measured} torch threads, this run has {threads} "
            "(OMP_NUM_THREADS): calibrate with the threads the real run uses, or set "
            "cost_model.allow_other_device: true",
            source=twin.source,
            field=twin.field,
        )


class Machine(NamedTuple):
    """What a real run's calibration profile must have been measured on."""

    device_name: str  # as `workbench calibrate` records it
    threads: int  # torch intra-op threads


def _this_machine(real: Scenario) -> Machine:
    import torch

    from real_backend.calibration.measure import device_name
    from real_backend.serve import pick_device

    return Machine(device_name(pick_device(real.hardware.gpu)), torch.get_num_threads())


def _check_device_name(twin: TwinProfile, here: str) -> None:
    """A profile of another card or processor prices another machine, even of the same kind
    (the cost model checks cpu or cuda and the dtype; this is the model of the device)."""
    if twin.profile.device_name != here:
        raise WorkbenchError(
            f"{twin.name} was measured on {twin.profile.device_name}, this run is on "
            f"{here}: calibrate on this machine, or set cost_model.allow_other_device: true",
            source=twin.source,
            field=twin.field,
        )


class StepPrices(NamedTuple):
    """The twin's prices of a real run's own steps: the line for the pair's table, and the
    price scale that makes them add up to the run's wall times (None: not priced)."""

    text: str
    scale: float | None
    draft_scale: float | None = None  # the draft's own, when its forwards were priced


def _step_prices(
    sim: Scenario, store: ResultsStore, steps: list[ProfilePoint], drafts: list[DraftForwards]
) -> StepPrices | None:
    """The twin's price of each step the real run ran, against its wall time, or why it
    could not be priced: the line only informs the error table, so a failure is recorded in
    it, never left to orphan the stored real run. None: no steps were measured. A drafting
    run's steps are the target's share; `drafts`, their draft forwards, priced apart."""
    from simulator.cost_models.calibrated import (
        CalibratedCostModel,
        served_errors_text,
        served_price_scale,
    )
    from simulator.cost_models.factory import build_cost_model

    if not steps:
        return None
    try:
        model = build_cost_model(with_model_source(sim), store)
        assert isinstance(model, CalibratedCostModel), "a twin is priced by its profile"
        text = served_errors_text(model, steps)
        draft_scale = None
        if draft_of(sim.decoder) is not None:  # the points hold the target's share of a step
            text += "; the target's share of each step (its measured draft forwards left out)"
            if drafts:
                draft_text, draft_scale = _draft_prices(sim, store, drafts)
                text += "; " + draft_text
        return StepPrices(text, served_price_scale(model, steps), draft_scale)
    except Exception as e:  # recorded in the run's info, not hidden
        return StepPrices(f"not priced ({type(e).__name__}: {e})", None)


def _draft_prices(
    sim: Scenario, store: ResultsStore, drafts: list[DraftForwards]
) -> tuple[str, float | None]:
    """The twin's draft price of each step's draft forwards, as the drafter ran them, and the
    draft's own price scale (None for a roofline draft); or why not: the target's line
    stands without it."""
    try:
        return _priced_drafts(sim, store, drafts)
    except Exception as e:  # recorded in the run's info, not hidden
        return f"the draft's forwards not priced ({type(e).__name__}: {e})", None


def _priced_drafts(
    sim: Scenario, store: ResultsStore, drafts: list[DraftForwards]
) -> tuple[str, float | None]:
    from simulator.cost_models.calibrated import CalibratedCostModel
    from simulator.decoders.draft_cost import (
        draft_cost_model,
        served_draft_errors_text,
        served_draft_scale,
    )
    from simulator.decoders.factory import draft_spec

    resolved = with_model_source(sim)
    spec = draft_spec(resolved)
    assert spec is not None, "a twin with draft forwards has a draft"
    model = draft_cost_model(resolved, spec, store)
    calibrated = isinstance(model, CalibratedCostModel)
    scale = served_draft_scale(model, drafts) if calibrated else None
    return served_draft_errors_text(model, drafts), scale


def _calibration_repeatability(sim: Scenario, store: ResultsStore) -> str | None:
    """How far the twin's calibration ran apart from itself, pass against pass (None: its
    profile repeats no probe)."""
    from simulator.cost_models.calibrated import load_profile
    from workbench.store.repeatability import pass_spread

    cost = sim.cost_model
    assert isinstance(cost, CalibratedCostConfig)  # twin_scenarios prices every twin so
    spread = pass_spread(load_profile(cost, store)[1])
    return None if spread is None else spread.describe()


def _drift_probe(sim: Scenario, store: ResultsStore) -> DriftProbe | None:
    """The profile's drift probes: for a stored profile measured on this device (not a CSV,
    nor one priced on another device), of a grid with drift probes, its checkpoint here."""
    cost = sim.cost_model
    if not isinstance(cost, CalibratedCostConfig) or cost.profile is None:
        return None
    if cost.allow_other_device:
        return None
    from real_backend.calibration.drift import DriftProbe

    profile = store.find_profile(cost.profile)
    return DriftProbe.of(profile, store.profile_points(profile.profile_id))


def _run_kernels(real: Scenario) -> str:
    """The kernel set the real run will use ("triton", "grouped" or "reference")."""
    from kernels.dispatch import KernelUnavailable, select_kernels
    from real_backend.serve import pick_device

    try:
        return select_kernels(real.model.kernels, pick_device(real.hardware.gpu)).name
    except KernelUnavailable as e:
        raise WorkbenchError(str(e), field="model.kernels") from None


def _check_kernels(twin: TwinProfile, kernels: str) -> None:
    """A profile of other attention kernels prices another engine (the plain references pad
    every row of a step to its longest, the grouped ones do not)."""
    measured = twin.profile.kernels
    if measured != kernels:
        raise WorkbenchError(
            f"{twin.name} was measured with the {measured} kernels, this run "
            f"uses the {kernels} ones: calibrate again (--kernels), or set model.kernels: "
            f"{measured}, or cost_model.allow_other_device: true",
            source=twin.source,
            field=twin.field,
        )


def _run_linear(real: Scenario) -> str:
    """What will run the real run's linear layers (`inference_linear.default_linear`)."""
    from real_backend.model.inference_linear import default_linear
    from real_backend.serve import dtype_of, pick_device

    return default_linear(dtype_of(real.model.dtype), pick_device(real.hardware.gpu))


def _check_linear(twin: TwinProfile, linear: str) -> None:
    """A profile whose linear layers ran another GEMM prices another engine (on CPU, the
    prepacked weights cost 1.5x MKL's at 2-3 rows on an Intel machine, 0.4-0.6x from 3 rows
    on an AMD one); a profile from before this was recorded ran the default of its day."""
    measured = twin.profile.linear
    if measured != linear:
        raise WorkbenchError(
            f"{twin.name}'s linear layers ran on {measured}, this run's will run "
            f"on {linear}: calibrate again with this code, or set "
            f"cost_model.allow_other_device: true",
            source=twin.source,
            field=twin.field,
        )


def _progress_label(point: SweepPoint, position: tuple[int, int]) -> str:
    index, total = position
    name = point.scenario.name
    return f"point {index}/{total} {name}" if total > 1 else name


def run_backend(
    scenario: Scenario,
    progress: Callable[[int], None] | None,
    store: ResultsStore | None = None,
    measure_steps: bool = False,
) -> RunRecords:
    """Dispatch to a backend; imported lazily so the light path never imports torch.

    store: the results database, where the simulator finds a run to calibrate from.
    measure_steps: the real backend keeps each step's work and wall time
    (`RunRecords.served_steps`)."""
    scenario = with_model_source(scenario)
    if scenario.backend == "sim":
        from simulator.run import simulate

        return simulate(scenario, progress=progress, store=store)
    with needs_real_extra("the real backend runs PyTorch", field="backend"):
        from real_backend.serve import serve_scenario
    return serve_scenario(scenario, progress=progress, measure_steps=measure_steps)


def with_model_source(scenario: Scenario) -> Scenario:
    """Point `model.config_path` (and a speculative draft's) at zoo checkpoint folders."""
    model = scenario.model
    if model.zoo is not None:
        folder = _zoo_folder(model.zoo, "target", model.zoo_dir, "model.zoo")
        model = model.model_copy(update={"config_path": folder})
    decoder = scenario.decoder
    draft = draft_of(decoder)
    if draft is not None and draft.config_path is None:
        pair = draft.zoo or (scenario.model.zoo if draft.name is None else None)
        if pair is not None:
            folder = _zoo_folder(pair, "draft", model.zoo_dir, f"{draft_field(decoder)}.zoo")
            decoder = with_draft(decoder, draft.model_copy(update={"config_path": folder}))
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
