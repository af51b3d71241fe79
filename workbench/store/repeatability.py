"""How well the calibrated machine repeats itself: the same probe, served in several passes.

A calibration serves each probe of its grid in several passes (`real_backend.calibration`),
and a probe of fixed lengths whose requests arrive together runs the very same steps in
every pass. The spread of those passes' summed step times is the machine's own noise over
the calibration's minutes, read without any cost model: a twin priced by the profile cannot
be expected to land closer to one real run than the machine lands to itself. Probes whose
passes ran other steps (lengths drawn anew per pass; closed loops, where timing decides when
a prompt joins) are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from workbench.store.profiles import ProfilePoint

MIN_PASSES = 3  # fewer: no median pass to measure the others against


@dataclass(frozen=True)
class PassSpread:
    """Over the probes that ran the same steps in every pass: the spread of a probe's pass
    totals, (longest − shortest) / median pass, its median and 90th percentile."""

    probes: int
    median: float
    p90: float

    def describe(self) -> str:
        return (
            f"a probe's passes, the same steps each, spread by {100 * self.median:.1f} % "
            f"((longest − shortest) / median pass; median over {self.probes} probes, p90 "
            f"{100 * self.p90:.1f} %)"
        )


def pass_spread(points: Iterable[ProfilePoint]) -> PassSpread | None:
    """The profile's pass-to-pass spread, or None where no probe ran the same steps in
    MIN_PASSES passes or more."""
    spreads = [_spread(passes) for passes in _passes_by_probe(points).values() if _repeats(passes)]
    if not spreads:
        return None
    values = np.array(spreads)  # (probes,)
    return PassSpread(len(values), float(np.median(values)), float(np.quantile(values, 0.9)))


def _passes_by_probe(points: Iterable[ProfilePoint]) -> dict[str, dict[str, list[ProfilePoint]]]:
    """probe name → its runs (`name@pass`) → their points in step order."""
    probes: dict[str, dict[str, list[ProfilePoint]]] = {}
    for point in sorted(points, key=lambda p: (p.probe, p.step)):
        name = point.probe.rsplit("@", 1)[0]
        probes.setdefault(name, {}).setdefault(point.probe, []).append(point)
    return probes


def _repeats(passes: dict[str, list[ProfilePoint]]) -> bool:
    """Whether the probe has MIN_PASSES passes that ran the same steps."""
    signatures = {tuple(_work(p) for p in steps) for steps in passes.values()}
    return len(passes) >= MIN_PASSES and len(signatures) == 1


def _work(point: ProfilePoint) -> tuple[object, ...]:
    return (
        point.step,
        point.prefill_chunk_tokens,
        point.prefill_context_tokens,
        point.decode_batch_size,
        point.decode_context_sum,
        point.decode_extra_tokens,
    )


def _spread(passes: dict[str, list[ProfilePoint]]) -> float:
    totals = np.array([sum(p.step_s for p in steps) for steps in passes.values()])  # (passes,)
    return float((totals.max() - totals.min()) / np.median(totals))
