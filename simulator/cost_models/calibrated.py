"""`cost_model: {kind: calibrated}`: a step priced as the real engine spends it.

The profile (`workbench calibrate`: the real engine's steps over a designed grid, each with
its work and its wall time) comes from the run's results database or an exported CSV; the
model fits `calibrated_fit` to its points when built. A profile measured on another device
or dtype than the scenario's, or of another model shape, is refused in one line (the first
unless the scenario sets `allow_other_device`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from simulator.catalogs.models import ModelSpec, resolve_model
from simulator.cost_models.base import SplitCostModel, StepWork, prefill_reach
from simulator.cost_models.calibrated_fit import (
    AfterPrefill,
    StepCostFit,
    fit_step_costs,
    prefill_keys,
)
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import PIPELINE_DECODER_KINDS, AparDecoderConfig, draft_of
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import CalibratedCostConfig
from workbench.store.profiles import VERIFY_REVISION, Profile, ProfilePoint, read_csv_profile

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore

FIELD = "cost_model.profile"
DRAFT_FIELD = "cost_model.draft_profile"
MULTI_TOKEN_DECODERS = ("speculative", "lookahead")
SHAPE_KEYS = (
    "num_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "vocab_size",
)


def step_work(point: ProfilePoint) -> StepWork:
    """The StepWork a profile point measured."""
    return StepWork(
        prefill_chunk_tokens=point.prefill_chunk_tokens,
        prefill_context_tokens=point.prefill_context_tokens,
        decode_batch_size=point.decode_batch_size,
        decode_context_sum=point.decode_context_sum,
        decode_context_max=point.decode_context_max,
        decode_extra_tokens=point.decode_extra_tokens,
        decode_extra_context_sum=point.decode_extra_context_sum,
        decode_forks=point.decode_forks,
    )


def fit_profile(
    points: list[ProfilePoint], profile: Profile | None = None, forwards: bool = False
) -> StepCostFit:
    """The step-cost fit of a profile's points: their step times (end to end, scheduling
    included), or with `forwards` their forward times (the model's forward with its sampling
    and cache work: what a speculative draft's forward costs inside a step)."""
    works = [step_work(p) for p in points]
    padded = profile is not None and pads_decode_attention(profile)
    one_call = 0.0 if profile is None else one_call_padding(profile)
    seconds = [p.forward_s if forwards else p.step_s for p in points]
    idle = [p.idle_before_s for p in points]
    runs = [p.probe for p in points]
    since = since_prefill(points)
    return fit_step_costs(
        works, seconds, padded_decode=padded, one_call_padding=one_call, idle_s=idle,
        runs=runs, since_prefill=since,
    )  # fmt: skip


def since_prefill(points: list[ProfilePoint]) -> list[tuple[int, int]]:
    """Per point: (steps since the last step of its probe run that prefilled, that step's
    `prefill_reach`), for prefilling steps too (`AfterPrefill.of` prices decode steps only);
    (0, 0) where no prefill came before it. A probe run's first step is no point (its cost
    would hold the wait for the first arrival) but always prefilled (an engine's first step
    has nothing else to run) what the first decode step after it decodes."""
    by_run: dict[str, dict[int, ProfilePoint]] = {}
    for point in points:
        by_run.setdefault(point.probe, {})[point.step] = point
    since: dict[tuple[str, int], tuple[int, int]] = {}
    for run, steps in by_run.items():
        last = (0, 0)
        for step in range(min(steps), max(steps) + 1):
            point = steps.get(step)
            if point is None:
                last = (0, 0)  # a step not measured: what it computed is not known
                continue
            if step == 1 and 0 not in steps:
                last = (0, _first_prefill_tokens(point))
            k, tokens = last
            since[(run, step)] = (k + 1, tokens) if tokens else (0, 0)
            if point.prefill_chunk_tokens:
                last = (0, prefill_reach(point.prefill_chunk_tokens, point.prefill_context_tokens))
            elif tokens:
                last = (k + 1, tokens)
    return [since[(p.probe, p.step)] for p in points]


def _first_prefill_tokens(second: ProfilePoint) -> int:
    """The prompt tokens a probe run's first step computed, seen from its second step: the
    prompts that it decodes (each KV its prompt and first token; a request that ended at the
    first step is not seen). A second step that prefills is priced by its own prefill."""
    return max(second.decode_context_sum - second.decode_batch_size, 0)


def pads_decode_attention(profile: Profile) -> bool:
    """Whether the profiled engine's decode attention pads to the batch's longest context
    (recorded since schema 9; older profiles are fitted by the context sum, as they were)."""
    return profile.info.get("decode_attention") == "padded"


def one_call_padding(profile: Profile) -> float:
    """The padded query-keys under which the profiled engine's attention computes a step in
    one call padded to the longest (recorded since 2026-11-28; 0 for older profiles and for
    kernels that never cut a batch into calls, the reference and Triton's: priced as before)."""
    return float(profile.info.get("one_call_padding", 0.0))


class CalibratedCostModel(SplitCostModel):
    """The fit's prices, each times `price_scale` (the machine's speed against its
    calibration's: `CalibratedCostConfig.price_scale`)."""

    def __init__(
        self, fit: StepCostFit, profile: Profile | None = None, price_scale: float = 1.0
    ) -> None:
        self.fit = fit
        self.profile = profile
        self.price_scale = price_scale
        self._terms = fit.terms

    def wake_s(self, idle_s: float) -> float:
        return self.price_scale * self.fit.wake_s(idle_s)

    @property
    def after_prefill_steps(self) -> int:
        return self.fit.after_prefill_steps

    def after_prefill_s(self, prefill_tokens: int, steps_after: int) -> float:
        return self.price_scale * self.fit.after_prefill_s(prefill_tokens, steps_after)

    def _decode_times_s(
        self, batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray
    ) -> np.ndarray:
        base = self.fit.at("decode", float(batch_size))
        context = self.fit.context_s("decode", batch_size, context_sums, context_maxes)
        return self.price_scale * (base + context)

    def _mixed_time_s(self, work: StepWork) -> float:
        # The profile measured this engine's forwards, which compute APAR forks' chunks in
        # the decode forward (priced as its extra rows, as a verification's).
        return self.price_scale * self._fitted_mixed_s(work.in_decode_forward())

    def _fitted_mixed_s(self, work: StepWork) -> float:
        seconds = 0.0
        if work.decode_batch_size:
            curve = "verify" if work.decode_extra_tokens else "decode"
            tokens = work.decode_batch_size + work.decode_extra_tokens
            sums = np.array([float(work.decode_context_sum)])
            maxes = np.array([float(work.decode_context_max)])
            context = self.fit.context_s(
                curve, work.decode_batch_size, sums, maxes, work.decode_extra_tokens
            )[0]
            seconds += self._curve_at(curve, float(tokens)) + float(context)
            seconds += self._terms[f"a_{curve}"] * work.decode_extra_context_sum
            if work.decode_forks:
                seconds += self._fork_s(work.decode_forks, self._decode_keys(work))
        if work.prefill_chunk_tokens:
            seconds += self._curve_at("prefill", float(sum(work.prefill_chunk_tokens)))
            seconds += self._terms["a_prefill"] * prefill_keys(work)
            seconds += self._terms["c_chunk"] * (len(work.prefill_chunk_tokens) - 1)
            if work.decode_batch_size:
                seconds += self._terms.get("m_mixed", 0.0)
        return seconds

    def _fork_s(self, forks: int, decode_keys: int) -> float:
        """What a step's forks cost beyond their rows (f_step + f_fork · F + f_key · S)."""
        if "f_fork" not in self._terms:  # build_calibrated checks what the scenario needs
            raise WorkbenchError("the calibration profile measured no APAR forks", field=FIELD)
        terms = self._terms
        return terms["f_step"] + terms["f_fork"] * forks + terms["f_key"] * decode_keys

    def _decode_keys(self, work: StepWork) -> int:
        """The decodes' keys as the profile's attention reads them (padded to the longest)."""
        return work.padded_decode_keys if self.fit.padded_decode else work.decode_context_sum

    def _curve_at(self, name: str, tokens: float) -> float:
        if name not in self.fit.curves:  # build_calibrated checks what the scenario needs
            raise WorkbenchError(f"the calibration profile measured no {name} steps", field=FIELD)
        return self.fit.at(name, tokens)


# ---------------------------------------------------------------- building


def build_calibrated(
    scenario: Scenario, model: ModelSpec, store: ResultsStore | None
) -> CalibratedCostModel:
    """The scenario's calibrated cost model, its profile checked against the scenario."""
    cfg = scenario.cost_model
    assert isinstance(cfg, CalibratedCostConfig)
    check_one_engine(scenario)
    profile, points = load_profile(cfg, store)
    check_profile(profile, scenario, model, cfg)
    if verifies(scenario):
        check_verify_revision(profile)
    fit = fit_profile(points, profile)
    check_kinds(fit, scenario, _profile_source(cfg, store))
    return CalibratedCostModel(fit, profile, cfg.price_scale)


def build_calibrated_draft(
    scenario: Scenario, draft: ModelSpec, store: ResultsStore | None
) -> CalibratedCostModel:
    """A speculative draft's forwards priced by its own profile (`cost_model.draft_profile`):
    the profile's forward times, fitted as the target's steps are. A draft's forward runs
    inside the target's step, so the engine's scheduling, priced once in the target's step,
    is left out."""
    cfg = scenario.cost_model
    assert isinstance(cfg, CalibratedCostConfig)
    profile, points = read_profile(cfg.draft_profile, cfg.draft_profile_csv, store, DRAFT_FIELD)
    check_profile(profile, scenario, draft, cfg, DRAFT_FIELD)
    check_verify_revision(profile, DRAFT_FIELD)  # its catch-ups are priced as verifications
    fit = fit_profile(points, profile, forwards=True)
    missing = sorted({"decode", "prefill", "verify"} - set(fit.kinds))
    if missing:
        raise WorkbenchError(
            f"{profile.describe()} measured no {' or '.join(missing)} steps, which a draft "
            "model's forwards run",
            field=DRAFT_FIELD,
        )
    scale = cfg.price_scale if cfg.draft_price_scale is None else cfg.draft_price_scale
    return CalibratedCostModel(fit, profile, scale)


def load_profile(
    cfg: CalibratedCostConfig, store: ResultsStore | None
) -> tuple[Profile, list[ProfilePoint]]:
    return read_profile(cfg.profile, cfg.profile_csv, store, FIELD)


def read_profile(
    ref: str | None, csv: Path | None, store: ResultsStore | None, field: str
) -> tuple[Profile, list[ProfilePoint]]:
    """A complete profile and its points: from the CSV when given, else `ref` (a name or id)
    in `store`. field: the scenario field that named it (`cost_model.profile`, or
    `cost_model.draft_profile`)."""
    profile, points = _located(ref, csv, store, field)
    if points is not None:
        return profile, points
    assert store is not None  # _located read it from the database
    return profile, store.profile_points(profile.profile_id)


def profile_of(
    ref: str | None, csv: Path | None, store: ResultsStore | None, field: str
) -> Profile:
    """`read_profile`'s profile without its points read from the database (a check of where
    and how it was measured)."""
    return _located(ref, csv, store, field)[0]


def _located(
    ref: str | None, csv: Path | None, store: ResultsStore | None, field: str
) -> tuple[Profile, list[ProfilePoint] | None]:
    """The profile, with its points when a CSV gave them."""
    if csv is not None:
        try:
            return read_csv_profile(csv)
        except WorkbenchError as error:
            raise error.for_field(f"{field}_csv") from None
    if store is None:
        raise WorkbenchError(
            f"the calibration profile {ref!r} is read from the results database: run "
            "with `--db FILE` (where `workbench calibrate` wrote it), or give "
            f"{field}_csv",
            field=field,
        )
    try:
        profile = store.find_profile(str(ref))
    except WorkbenchError as error:
        raise error.for_field(field) from None
    if not profile.complete:
        raise WorkbenchError(
            f"{profile.describe()} is incomplete (its calibration was interrupted): run "
            "`workbench calibrate` again to finish it",
            source=store.path,
            field=field,
        )
    return profile, None


class Preferences(NamedTuple):
    """What the twin's real run runs with: a profile measured so is preferred."""

    kernels: str | None = None  # its attention kernels ("triton", "grouped", "reference")
    machine: tuple[str, int] | None = None  # this device's name and torch threads
    linear: str | None = None  # what runs its linear layers (`Profile.linear`)


def calibrated_config_for(
    scenario: Scenario,
    store: ResultsStore,
    ref: str | None,
    kernels: str | None = None,
    machine: tuple[str, int] | None = None,
    linear: str | None = None,
) -> CalibratedCostConfig:
    """The calibrated cost model of a real scenario's simulated twin: profile `ref` (in the
    scenario's own calibrated model when it has one, its other settings kept), else the
    scenario's own calibrated model, else the latest complete profile of its model shape,
    device and dtype in `store`, preferring one measured with `kernels` and `linear` (the
    run's), then on this `machine` (its device name, then its threads)."""
    own = scenario.cost_model
    if ref is not None and isinstance(own, CalibratedCostConfig):  # its draft settings kept
        return own.model_copy(update={"profile": ref, "profile_csv": None})
    if ref is not None:
        return CalibratedCostConfig(kind="calibrated", profile=ref)
    if isinstance(own, CalibratedCostConfig):
        return own
    best = latest_profile(
        store, resolve_model(scenario.model), scenario, Preferences(kernels, machine, linear)
    )
    if best is None:
        model = scenario.model.zoo or scenario.model.config_path or scenario.model.name
        device, dtype = scenario_device(scenario), scenario.model.dtype
        raise WorkbenchError(
            f"no complete calibration profile of {scenario.model.name} on {device} {dtype} in "
            f"{store.path}: run `workbench calibrate --model {model} --device {device} "
            f"--dtype {dtype} --db {store.path}` first, or name a profile with --profile",
            field="cost_model",
        )
    return CalibratedCostConfig(kind="calibrated", profile=best.profile_id)


def with_draft_profile(
    cost: CalibratedCostConfig,
    scenario: Scenario,
    draft: tuple[ModelSpec, Path | None],  # its shape and checkpoint folder
    store: ResultsStore,
    prefer: Preferences,
) -> CalibratedCostConfig:
    """A twin's cost model with the draft priced too: as `cost` says, else by the latest
    complete profile of the draft's shape (preferred as the target's is)."""
    if cost.draft_profile or cost.draft_profile_csv or cost.draft_roofline:
        return cost
    spec, folder = draft
    best = latest_profile(store, spec, scenario, prefer)
    if best is None:
        device, dtype = scenario_device(scenario), scenario.model.dtype
        raise WorkbenchError(
            f"no complete calibration profile of the draft model {spec.name} on {device} "
            f"{dtype} in {store.path}: run `workbench calibrate --model {folder or spec.name} "
            f"--device {device} --dtype {dtype} --db {store.path}` first, or set "
            "cost_model.draft_roofline: true",
            field=DRAFT_FIELD,
        )
    return cost.model_copy(update={"draft_profile": best.profile_id})


def latest_profile(
    store: ResultsStore, model: ModelSpec, scenario: Scenario, prefer: Preferences
) -> Profile | None:
    """The latest complete profile of `model`'s shape on the scenario's device and dtype,
    preferring one measured with the run's kernels and linear layers, then on this machine
    (its device name, then its threads), then, for a scenario that verifies, one whose
    verifications the current probe measured (an older one is refused: better this machine's
    refused, which says to calibrate again here, than another machine's); None: none."""
    shape = {key: getattr(model, key) for key in SHAPE_KEYS}
    device, dtype = scenario_device(scenario), scenario.model.dtype
    matches = [
        p
        for p in store.profiles()
        if p.complete and (p.device, p.dtype) == (device, dtype) and p.model_shape == shape
    ]
    if not matches:
        return None
    name, threads = prefer.machine or (None, None)
    verifying = verifies(scenario)

    def preference(i: int) -> tuple[bool, bool, bool, bool, bool, int]:
        p = matches[i]
        return (
            p.kernels == prefer.kernels,
            p.linear == prefer.linear,
            p.device_name == name,
            p.threads == threads,
            p.verify_revision >= VERIFY_REVISION or not verifying,
            i,
        )

    return matches[max(range(len(matches)), key=preference)]


def scenario_device(scenario: Scenario) -> str:
    """What the real backend runs the scenario on: cpu for `hardware.gpu: cpu`, else cuda."""
    return "cpu" if scenario.hardware.gpu == "cpu" else "cuda"


def check_profile(
    profile: Profile,
    scenario: Scenario,
    model: ModelSpec,
    cfg: CalibratedCostConfig,
    field: str = FIELD,
) -> None:
    """Refuse a profile of another model shape, or (unless allowed) another device or dtype.
    field: the scenario field that named the profile."""
    where = f"{profile.describe()}"
    shape = {key: getattr(model, key) for key in SHAPE_KEYS}
    measured = {key: profile.model_shape.get(key) for key in SHAPE_KEYS}
    if shape != measured:
        differ = [
            f"{k} {measured[k]} (scenario {shape[k]})"
            for k in SHAPE_KEYS
            if shape[k] != measured[k]
        ]
        raise WorkbenchError(f"{where} measured another model: {', '.join(differ)}", field=field)
    if cfg.allow_other_device:
        return
    device, dtype = scenario_device(scenario), scenario.model.dtype
    if (profile.device, profile.dtype) != (device, dtype):
        raise WorkbenchError(
            f"{where} was measured on {profile.device} {profile.dtype}, the scenario runs on "
            f"{device} {dtype}; calibrate on that device, or set "
            "cost_model.allow_other_device: true to price it with this profile anyway",
            field=field,
        )


def verifies(scenario: Scenario) -> bool:
    """Whether the scenario's engine runs verification-shaped steps (drafted or guessed
    tokens; APAR's forks' chunks beside the decodes), priced by the verify curve."""
    decoder = scenario.decoder
    forks = isinstance(decoder, AparDecoderConfig) and decoder.forks
    return decoder.kind in MULTI_TOKEN_DECODERS or forks or draft_of(decoder) is not None


def check_verify_revision(profile: Profile, field: str = FIELD) -> None:
    """Refuse a profile whose verification steps an older probe measured (see
    `VERIFY_REVISION`): its prices for them are known to be wrong, not merely noisy."""
    if profile.verify_revision >= VERIFY_REVISION:
        return
    raise WorkbenchError(
        f"{profile.describe()} measured its verification steps with an older probe (verify "
        f"revision {profile.verify_revision}, this workbench's is {VERIFY_REVISION}), which "
        "misprices them; calibrate again: `workbench calibrate --model "
        f"{profile.model} --device {profile.device} --dtype {profile.dtype} --db FILE`",
        field=field,
    )


def check_one_engine(scenario: Scenario) -> None:
    """A profile measured one engine on one device: pipeline stages are refused first."""
    if scenario.decoder.kind in PIPELINE_DECODER_KINDS:
        raise WorkbenchError(
            "a calibrated cost model prices one engine on one device, not pipeline stages",
            field="cost_model.kind",
        )


def check_kinds(fit: StepCostFit, scenario: Scenario, source: str) -> None:
    """The profile must have measured every step kind the scenario's engine runs, and APAR's
    forks where its branches fork."""
    needed = {"decode", "prefill"}
    if verifies(scenario):
        needed.add("verify")
    missing = sorted(needed - set(fit.kinds))
    if missing:
        raise WorkbenchError(
            f"the calibration profile in {source} measured no {' or '.join(missing)} steps, "
            f"which the scenario's {scenario.decoder.kind} decoding runs",
            field=FIELD,
        )
    decoder = scenario.decoder
    if isinstance(decoder, AparDecoderConfig) and decoder.forks and "f_fork" not in fit.terms:
        raise WorkbenchError(
            f"the calibration profile in {source} measured no APAR forks (its calibration "
            "predates the fork probes, or its model has no fork tokens): calibrate the APAR "
            "model again, `workbench calibrate --model MODEL --again`",
            field=FIELD,
        )


def _profile_source(cfg: CalibratedCostConfig, store: ResultsStore | None) -> str:
    if cfg.profile_csv is not None:
        return str(cfg.profile_csv)
    return store.path if store is not None else "?"


# ---------------------------------------------------------------- how well it fits


def predicted_s(model: CalibratedCostModel, points: list[ProfilePoint]) -> np.ndarray:
    """The model's price of each measured step, its history (a wake, a prefill before) in."""
    works = [step_work(point) for point in points]
    after = AfterPrefill.of(works, since_prefill(points))
    prices = [
        model.step_time_s(work)
        + model.wake_s(point.idle_before_s)
        + model.after_prefill_s(int(tokens), int(k))
        for point, work, k, tokens in zip(points, works, after.steps, after.tokens, strict=True)
    ]
    return np.array(prices, dtype=np.float64)  # (n_points,)


def fit_errors(
    model: CalibratedCostModel, points: list[ProfilePoint]
) -> dict[str, tuple[int, float, float, float]]:
    """Per step kind: points, median and p90 of |predicted / measured − 1|, and the ratio of
    the summed predictions to the summed measurements (what latencies add up)."""
    return _errors_by(points, predicted_s(model, points), lambda point: point.kind)


# Decode batch sizes priced apart in a served run's check (largest of each band): the matrix
# kernels change regime at powers of two, and a loaded engine's batches spread over these.
BATCH_BAND_TOPS = (1, 4, 8, 16)


def batch_band(batch_size: int) -> str:
    """'1', '2-4', '5-8', '9-16' or '17+'."""
    low = 1
    for top in BATCH_BAND_TOPS:
        if batch_size <= top:
            return str(top) if low == top else f"{low}-{top}"
        low = top + 1
    return f"{low}+"


# Step kinds whose served steps are also priced by batch band: a price that is right in sum
# but wrong in its growth with the batch shows there (and a loaded twin queues on it).
BANDED_KINDS = ("decode", "verify")


def served_errors(
    model: CalibratedCostModel, points: list[ProfilePoint]
) -> dict[str, tuple[int, float, float, float]]:
    """`fit_errors` of a served run's own steps, its decode and verify steps by batch band as
    well: the twin's price of each step the real engine ran, apart from how the twin's steps
    differ."""
    predicted = predicted_s(model, points)
    errors = _errors_by(points, predicted, lambda point: point.kind)
    banded = sorted(
        (BANDED_KINDS.index(point.kind), point.decode_batch_size, i)
        for i, point in enumerate(points)
        if point.kind in BANDED_KINDS
    )
    ordered = [i for *_, i in banded]  # each kind's bands in batch order
    return errors | _errors_by(
        [points[i] for i in ordered],
        predicted[ordered],
        lambda point: f"{point.kind}, batch {batch_band(point.decode_batch_size)}",
    )


def served_errors_text(model: CalibratedCostModel, points: list[ProfilePoint]) -> str:
    """'decode +0.5% (median |error| 3.8%, 5,102 steps); ...': `served_errors` as a line,
    the summed prices against the summed wall times first (what latencies add up)."""
    return "; ".join(
        f"{name} {100 * (total - 1):+.1f}% (median |error| {100 * median:.1f}%, {n:,} steps)"
        for name, (n, median, _p90, total) in served_errors(model, points).items()
    )


def served_price_scale(model: CalibratedCostModel, points: list[ProfilePoint]) -> float:
    """The `price_scale` whose prices of a served run's own steps add up to their wall times:
    the machine's speed during the run against its calibration's, read from the run itself."""
    measured = sum(point.step_s for point in points)
    return model.price_scale * float(measured / predicted_s(model, points).sum())


def _errors_by(
    points: list[ProfilePoint], predicted: np.ndarray, key: Callable[[ProfilePoint], str]
) -> dict[str, tuple[int, float, float, float]]:
    groups: dict[str, list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(key(point), []).append(i)
    measured = np.array([point.step_s for point in points], dtype=np.float64)
    errors = {}
    for name, rows in groups.items():
        relative = np.abs(predicted[rows] / measured[rows] - 1.0)
        errors[name] = (
            len(rows),
            float(np.median(relative)),
            float(np.quantile(relative, 0.9)),
            float(predicted[rows].sum() / measured[rows].sum()),
        )
    return errors
