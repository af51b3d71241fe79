"""`workbench calibrate`: serve the grid's probes on the real engine and store each step.

Resumable: each probe's points are written in one transaction as it ends; a calibration
started again with the same name and conditions (model, device, dtype, threads, grid)
skips the probes already stored, and marks the profile complete with its last probe.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernels.dispatch import KernelChoice, KernelUnavailable, select_kernels
from real_backend.calibration.fork_probe import CuedForkProbe
from real_backend.calibration.grid import BLOCK_SIZE, Grid, Probe, get_grid
from real_backend.calibration.probe_engine import ProfilingEngine, probe_points
from real_backend.calibration.verify_probe import VerifyWidthProbe
from real_backend.cpu_info import cpuinfo_field
from real_backend.decoders.apar import ForkTokens, model_fork_tokens
from real_backend.decoders.base import Decoder
from real_backend.engine import ServeOptions
from real_backend.kv_cache import PagedKVCache
from real_backend.model.config import ModelArgs
from real_backend.model.inference_linear import default_linear
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import Transformer
from real_backend.prompts import synthetic_prompts
from real_backend.serve import DTYPES, eos_token_ids
from real_backend.zoo.build import resolve_zoo_model
from real_backend.zoo.specs import SPECS
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import AparDecoderConfig, VanillaDecoderConfig
from workbench.scheduling.factory import build_policy
from workbench.store.db import ResultsStore
from workbench.store.profiles import VERIFY_REVISION, Profile, ProfilePoint

SEED = 0
GREEDY = VanillaDecoderConfig(kind="vanilla")


@dataclass(frozen=True)
class CalibrationTarget:
    """What to measure: a checkpoint on a device in a dtype."""

    model: str  # as the user named it
    folder: Path
    device: str  # cpu | cuda
    dtype: str
    kernels: KernelChoice = "auto"


@dataclass
class CalibrationOutcome:
    profile: Profile
    measured: list[str]  # probes measured now
    skipped: list[str]  # probes already stored (a resumed calibration)
    already_complete: bool = False
    not_in_profile: list[str] = field(default_factory=list)  # a complete profile of an older grid


def resolve_target(
    model: str, device: str, dtype: str, zoo_dir: str | None, kernels: KernelChoice = "auto"
) -> CalibrationTarget:
    """The checkpoint of `model` (a zoo name or a checkpoint folder), checked for the device."""
    if model in SPECS:
        cache = Path(zoo_dir).expanduser() if zoo_dir else None
        try:
            folder = resolve_zoo_model(model, "target", cache)
        except WorkbenchError as error:
            raise WorkbenchError(error.detail, field="--model") from None
    else:
        folder = Path(model).expanduser()
        if folder.is_file() and folder.name == "config.json":
            folder = folder.parent
        if not (folder / "config.json").is_file():
            raise WorkbenchError(
                f"unknown model {model!r}: neither a zoo model ({', '.join(SPECS)}) nor a "
                "checkpoint folder with a config.json",
                field="--model",
            )
    if dtype not in DTYPES:
        raise WorkbenchError(
            f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}", field="--dtype"
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise WorkbenchError("--device cuda but this machine has no CUDA device", field="--device")
    if device not in ("cpu", "cuda"):
        raise WorkbenchError(f"device must be cpu or cuda, not {device!r}", field="--device")
    try:
        select_kernels(kernels, device)
    except (KernelUnavailable, ValueError) as e:
        raise WorkbenchError(str(e), field="--kernels") from None
    return CalibrationTarget(model, folder.resolve(), device, dtype, kernels)


def calibrate(
    target: CalibrationTarget,
    store: ResultsStore,
    *,
    name: str | None = None,
    grid_name: str = "standard",
    again: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> CalibrationOutcome:
    """Measure the grid's probes not yet stored for this profile; returns what was done.

    progress(done, total, probe): called before each probe (and once at the end)."""
    args = ModelArgs.from_folder(target.folder)
    forks = apar_tokens(target.folder)
    grid = get_grid(grid_name, args.context_tokens, forks is not None)
    profile_name = name or default_name(target)
    conditions = _new_profile(target, grid, profile_name, args)
    profile = _resumable(store, conditions, again)
    done = set() if profile is None else store.profile_probes_done(profile.profile_id)
    runs = grid.runs()
    if profile is not None and profile.complete:
        older = [run.name for run in runs if run.name not in done]  # the grid grew since
        return CalibrationOutcome(
            profile, [], sorted(done), already_complete=True, not_in_profile=older
        )
    todo = [run for run in runs if run.name not in done]
    model = load_checkpoint(target.folder, DTYPES[target.dtype], target.device)
    model.use_kernels(target.kernels)
    if profile is None:  # stored once the checkpoint has loaded: a bad one leaves no row
        store.add_profile(conditions)
        profile = conditions
    avoid = set(eos_token_ids(target.folder))
    serve_probe(model, grid.warmup, SEED, "warmup", avoid)  # thrown away
    for index, run in enumerate(todo):
        if progress is not None:
            progress(len(done) + index, len(runs), run.name)
        points = serve_probe(model, run.probe, run.seed, run.name, avoid, forks)
        store.write_probe(profile.profile_id, points, last=index == len(todo) - 1)
    if progress is not None:
        progress(len(runs), len(runs), "")
    profile = store.find_profile(profile.profile_id)
    return CalibrationOutcome(profile, [run.name for run in todo], sorted(done))


def default_name(target: CalibrationTarget) -> str:
    label = target.model if target.model in SPECS else target.folder.name
    return f"{label}-{target.device}-{target.dtype}"


def _resumable(store: ResultsStore, conditions: Profile, again: bool) -> Profile | None:
    """The latest profile of this name measured under the same conditions (to resume or to
    report complete); None for a new one (also with `again` after a complete one)."""
    same = [
        p
        for p in store.profiles()
        if p.name == conditions.name and _conditions(p) == _conditions(conditions)
    ]
    if same and not (again and same[-1].complete):
        return same[-1]
    return None


def _conditions(profile: Profile) -> tuple[object, ...]:
    # decode_attention: profiles begun before schema 9 recorded neither padding nor idle
    # time, so an interrupted one is not resumed with points that do
    # (nor one whose verification steps were measured otherwise, or begun before the grouped
    # attention's one-call rule was recorded)
    attention, kernels = profile.info.get("decode_attention"), profile.info.get("kernels")
    one_call = profile.info.get("one_call_padding")
    return (
        profile.checkpoint, profile.device, profile.dtype, profile.threads, profile.grid,
        attention, kernels, one_call, profile.linear, profile.verify_revision,
    )  # fmt: skip


def _new_profile(target: CalibrationTarget, grid: Grid, name: str, args: ModelArgs) -> Profile:
    from workbench.runner import git_sha, package_versions  # no backend import there

    kernels = select_kernels(target.kernels, target.device)

    return Profile(
        name=name,
        model=target.model,
        checkpoint=str(target.folder),
        model_shape=model_shape(args),
        device=target.device,
        device_name=device_name(target.device),
        dtype=target.dtype,
        threads=torch.get_num_threads(),
        grid=grid.name,
        probes=len(grid.runs()),
        versions=package_versions(),
        git_sha=git_sha(),
        created_at=time.time(),
        info={
            "load_average_at_start": _load_average(),
            "platform": platform.platform(),
            "kernels": kernels.name,
            "decode_attention": "padded" if kernels.pads_attention else "exact",
            "one_call_padding": kernels.one_call_padding(args.n_heads * args.head_dim),
            "linear": default_linear(DTYPES[target.dtype], target.device),
            "verify_revision": VERIFY_REVISION,
        },
    )


def model_shape(args: ModelArgs) -> dict[str, int]:
    """The shape in the simulator's model-spec terms (`simulator.catalogs.models.ModelSpec`)."""
    return {
        "num_layers": args.n_layers,
        "hidden_size": args.dim,
        "intermediate_size": args.intermediate_size,
        "num_attention_heads": args.n_heads,
        "num_kv_heads": args.n_kv_heads,
        "head_dim": args.head_dim,
        "vocab_size": args.vocab_size,
    }


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    model = cpuinfo_field("model name") or platform.processor() or platform.machine()
    return f"{model} ×{os.cpu_count()}"


def _load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def apar_tokens(folder: Path) -> ForkTokens | None:
    """The checkpoint's fork and child tokens (an APAR model: the grid's fork probes run),
    or None for a model without them."""
    return model_fork_tokens(folder, AparDecoderConfig(kind="apar"))


def serve_probe(
    model: Transformer,
    probe: Probe,
    seed: int,
    name: str,
    avoid: set[int],
    forks: ForkTokens | None = None,
) -> list[ProfilePoint]:
    """Serve the probe's workload on a fresh cache; its steps as profile points. forks: the
    model's fork tokens, which a fork probe needs."""
    workload = probe.workload(seed)
    blocks = probe.kv_blocks()
    cache = model.new_cache(blocks, BLOCK_SIZE)
    branching = probe.fork_every > 0
    policy = build_policy(probe.scheduler(), blocks, probe.width, branching)
    decoder = _probe_decoder(model, cache, probe, forks)
    engine = ProfilingEngine(model, cache, policy, ServeOptions(GREEDY, seed), decoder)
    prompts = synthetic_prompts(workload.prompt_tokens, model.args.vocab_size, seed, avoid)
    records, _ = engine.serve(workload, prompts)
    return probe_points(name, engine.shapes, records.steps)


def _probe_decoder(
    model: Transformer, cache: PagedKVCache, probe: Probe, forks: ForkTokens | None
) -> Decoder | None:
    """A verification's or a fork's probe decoder; None: the engine's vanilla decoding."""
    if probe.width:
        return VerifyWidthProbe(model, cache, probe.width)
    if not probe.fork_every:
        return None
    if forks is None:
        raise ValueError(f"probe {probe.name} forks: it needs a model with fork tokens")
    every, branches, together = probe.fork_every, probe.fork_branches, probe.fork_together
    return CuedForkProbe(model, cache, forks, every, branches, together)
