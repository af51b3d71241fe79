"""How well the calibrated machine repeats itself: the same probe, served in several passes.

A calibration serves each probe of its grid in several passes (`real_backend.calibration`),
and a probe of fixed lengths whose requests arrive together runs the very same steps in
every pass. How far those passes' summed step times stray from each other is the machine's
own noise over the calibration's minutes, read without any cost model: a twin priced by the
profile is compared with one real run, which carries noise of that kind. Probes whose
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
    """Over the probes that ran the same steps in every pass: how far a pass's summed step
    time strays from its probe's median pass, |pass / median − 1|, weighted by the probe's
    time (a long probe is a better reading than a few steps): its mean and 90th percentile."""

    probes: int
    passes: int
    mean: float
    p90: float

    def describe(self) -> str:
        return (
            f"a pass strayed from its probe's median pass by {100 * self.mean:.1f} % "
            f"(time-weighted mean of |pass / median − 1| over {self.passes} passes of "
            f"{self.probes} probes that ran the same steps in each; p90 {100 * self.p90:.1f} %)"
        )


def pass_spread(points: Iterable[ProfilePoint]) -> PassSpread | None:
    """The profile's pass-to-pass spread, or None where no probe ran the same steps in
    MIN_PASSES passes or more."""
    deviations, weights = [], []
    repeated = [p for p in passes_by_probe(points).values() if _repeats(p)]
    for passes in repeated:
        totals = np.array([sum(p.step_s for p in steps) for steps in passes.values()])  # (k,)
        middle = float(np.median(totals))
        deviations += list(np.abs(totals / middle - 1.0))
        weights += [middle] * len(totals)
    if not deviations:
        return None
    values, w = np.array(deviations), np.array(weights)  # (passes,)
    mean = float(np.average(values, weights=w))
    return PassSpread(len(repeated), len(values), mean, _weighted_quantile(values, w, 0.9))


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value whose share of the weight at or below it reaches q."""
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][np.searchsorted(cumulative, q)])


def passes_by_probe(points: Iterable[ProfilePoint]) -> dict[str, dict[str, list[ProfilePoint]]]:
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
