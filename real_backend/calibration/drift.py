"""How far the machine has drifted since a profile was measured: two of its probes again.

A simulated twin priced by a calibration profile can be no closer to its real run than the
machine is to itself: on a shared CPU the same probe measured half an hour apart differs by
10-30 %. So `--backend both` serves a decode probe and a mixed probe of the profile's grid
again, right before and right after the real run, on the same checkpoint, device, dtype and
kernels, and compares their median step time with the profile's median pass of the probe (the
median over its passes of each pass's median step; every pass runs the same steps). Not the
first pass alone: one slow pass would read as drift in every run priced by the profile (on
2026-11-28 the first of three passes of decode-b8-p384 took 5.67 ms a step, the others 3.10
and 3.29 ms, and it read −28 to −42 % before and after two runs whose own verify steps the
profile priced +4.7 and +0.6 %). A twin error of the size of the drift is the machine's, not
the model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from real_backend.calibration.grid import Probe, get_grid
from real_backend.calibration.measure import SEED, serve_probe
from real_backend.model.config import ModelArgs
from real_backend.model.loading import load_checkpoint
from real_backend.serve import DTYPES, eos_token_ids
from workbench.store.profiles import Profile, ProfilePoint
from workbench.store.repeatability import passes_by_probe

__all__ = ["DRIFT_PROBES", "DriftProbe", "ProbeDrift", "drift_text"]

# Per grid: a decode probe at a mid batch and a mixed probe (new prompts joining decodes):
# the two step kinds most of a served run's time goes to, a few seconds each.
DRIFT_PROBES = {"standard": ("decode-b8-p384", "mixed-b16"), "test": ("decode-b4-p48", "mixed-b4")}


@dataclass(frozen=True)
class ProbeDrift:
    probe: str
    profile_ms: float  # median step time in the profile's median pass of the probe
    now_ms: float  # median step time served now

    @property
    def change(self) -> float:
        return self.now_ms / self.profile_ms - 1


class DriftProbe:
    """The profile's drift probes; `measure()` loads its model and serves them again."""

    def __init__(self, profile: Profile, points: list[ProfilePoint]):
        self.profile = profile
        self.folder = Path(profile.checkpoint)
        grid = get_grid(profile.grid, ModelArgs.from_folder(self.folder).context_tokens)
        names = DRIFT_PROBES.get(profile.grid, ())
        self.warmup = grid.warmup
        self.profile_ms = {
            p.name: ms
            for p in grid.probes
            if p.name in names and (ms := median_pass_ms(points, p.name)) is not None
        }
        self.probes: list[Probe] = [p for p in grid.probes if p.name in self.profile_ms]

    @classmethod
    def of(cls, profile: Profile, points: list[ProfilePoint]) -> DriftProbe | None:
        """None where nothing can be compared: another grid, a checkpoint no longer there,
        or none of the probes in the profile."""
        if (
            profile.grid not in DRIFT_PROBES
            or not (Path(profile.checkpoint) / "config.json").is_file()
        ):
            return None
        drift = cls(profile, points)
        return drift if drift.probes else None

    def measure(self) -> list[ProbeDrift]:
        """Loaded for the measurement only, so that the real run never shares the memory."""
        model = load_checkpoint(self.folder, DTYPES[self.profile.dtype], self.profile.device)
        model.use_kernels(self.profile.kernels)  # type: ignore[arg-type]
        avoid = set(eos_token_ids(self.folder))
        serve_probe(model, self.warmup, SEED, "warmup", avoid)  # thrown away
        drifts = []
        for probe in self.probes:
            now = serve_probe(model, probe, 0, f"{probe.name}@drift", avoid)
            if now:
                drifts.append(ProbeDrift(probe.name, self.profile_ms[probe.name], _median_of(now)))
        return drifts

    @staticmethod
    def describe(before: list[ProbeDrift] | str, after: list[ProbeDrift] | str) -> str:
        return drift_text(before, after)

    def measure_or_why(self) -> list[ProbeDrift] | str:
        """`measure()`, or why it failed: the probes only inform the error table, so a
        failure there is recorded, never left to orphan a stored real run."""
        try:
            return self.measure()
        except Exception as e:  # recorded in the run's info, not hidden
            return f"not measured ({type(e).__name__}: {e})"


def median_pass_ms(points: list[ProfilePoint], probe: str) -> float | None:
    """The median over the profile's passes of `probe` (runs `probe@1`, `probe@2`, ...) of
    each pass's median step time, in ms; None where the profile never served it."""
    passes = passes_by_probe(points).get(probe)
    if not passes:
        return None
    return float(np.median([_median_of(steps) for steps in passes.values()]))


def _median_of(points: list[ProfilePoint]) -> float:
    return float(np.median([p.step_s for p in points])) * 1e3


def drift_text(before: list[ProbeDrift] | str, after: list[ProbeDrift] | str) -> str:
    """'decode-b8-p384 +3.1% before the run, +18.0% after; ...' (step time against the
    profile's), or why the probes could not run."""
    if isinstance(before, str) or isinstance(after, str):
        return before if isinstance(before, str) else str(after)
    after_by = {d.probe: d for d in after}
    parts = []
    for d in before:
        later = after_by.get(d.probe)
        tail = f", {later.change:+.1%} after" if later is not None else ""
        parts.append(f"{d.probe} {d.change:+.1%} before the run{tail}")
    return "; ".join(parts)
