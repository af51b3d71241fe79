"""Length distributions for prompts and outputs, in tokens. One sampler per `kind`.

Every sampler returns int64 lengths >= 1. Continuous distributions are rounded to the nearest
integer, then truncated by rejection: a draw that rounds outside [min, max] is discarded and
drawn again, so the result is the distribution conditioned on the range (not clipped, which
would pile mass on the bounds).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.scenario.workload import (
    EmpiricalLength,
    FixedLength,
    LengthConfig,
    LognormalLength,
    NormalLength,
    UniformLength,
)
from workbench.workload.traces import read_lengths

# Below this probability of landing in [min, max] the configuration is almost surely a
# mistake (a mean far outside the range), and rejection sampling would crawl.
_MIN_ACCEPTED_MASS = 1e-4
# Without a `max`, stop at the largest float64 that is still an exact integer: no overflow.
_NO_MAX = 2.0**53
# Largest batch drawn at once during rejection sampling (bounds memory).
_MAX_BATCH = 1 << 22

LengthSampler = Callable[[Any, int, np.random.Generator, str], np.ndarray]


def sample_lengths(
    config: LengthConfig, n: int, rng: np.random.Generator, *, field: str = "lengths"
) -> np.ndarray:
    """`n` lengths from `config`, drawing only from `rng`; `field` names it in errors. # (n,)"""
    return LENGTH_SAMPLERS[config.kind](config, n, rng, field)


def fixed_lengths(config: FixedLength, n: int, rng: np.random.Generator, field: str) -> np.ndarray:
    return np.full(n, config.value, dtype=np.int64)  # (n,)


def uniform_lengths(
    config: UniformLength, n: int, rng: np.random.Generator, field: str
) -> np.ndarray:
    return rng.integers(config.low, config.high, size=n, endpoint=True, dtype=np.int64)  # (n,)


def normal_lengths(
    config: NormalLength, n: int, rng: np.random.Generator, field: str
) -> np.ndarray:
    lo, hi = config.min, config.max
    hi_edge = hi + 0.5 if hi is not None else math.inf  # draws below it round to <= max
    mass = _normal_mass(lo - 0.5, hi_edge, config.mean, config.std)
    _check_mass(mass, lo, hi, field)
    return _rejection_sample(
        lambda size: rng.normal(config.mean, config.std, size=size), n, lo, hi, mass
    )


def lognormal_lengths(
    config: LognormalLength, n: int, rng: np.random.Generator, field: str
) -> np.ndarray:
    mu, sigma = lognormal_params(config.mean, config.std)
    lo, hi = config.min, config.max
    log_hi = math.log(hi + 0.5) if hi is not None else math.inf
    mass = _normal_mass(math.log(lo - 0.5), log_hi, mu, sigma)  # lo >= 1, so lo - 0.5 > 0
    _check_mass(mass, lo, hi, field)
    return _rejection_sample(lambda size: rng.lognormal(mu, sigma, size=size), n, lo, hi, mass)


def lognormal_params(mean: float, std: float) -> tuple[float, float]:
    """(mu, sigma) of the underlying normal, so the length itself has this mean and std."""
    sigma2 = math.log1p((std / mean) ** 2)
    return math.log(mean) - sigma2 / 2, math.sqrt(sigma2)


def empirical_lengths(
    config: EmpiricalLength, n: int, rng: np.random.Generator, field: str
) -> np.ndarray:
    """Sample with replacement from the column's values (those above `max` dropped first)."""
    values = read_lengths(config.path, config.column)  # (rows,) int64
    if config.max is not None:
        values = values[values <= config.max]
        if len(values) == 0:
            raise WorkbenchError(
                f"no value is <= max ({config.max}); max drops the whole column",
                source=str(config.path),
                field=config.column,
            )
    return values[rng.integers(0, len(values), size=n)]  # (n,)


# ------------------------------------------------------------------ truncation


def _normal_mass(lo: float, hi: float, mean: float, std: float) -> float:
    """P(lo <= X <= hi) for X ~ N(mean, std²); std 0 is a point mass at the mean."""
    if std == 0:
        return 1.0 if lo <= mean <= hi else 0.0
    scale = std * math.sqrt(2.0)
    return 0.5 * (math.erf((hi - mean) / scale) - math.erf((lo - mean) / scale))


def _check_mass(mass: float, lo: int, hi: int | None, field: str) -> None:
    if mass < _MIN_ACCEPTED_MASS:
        raise WorkbenchError(
            f"the distribution puts {mass:.2g} of its mass in [min, max] = "
            f"[{lo}, {hi if hi is not None else 'no max'}] "
            f"(need at least {_MIN_ACCEPTED_MASS:g}); move the mean or widen the range",
            field=field,
        )


def _rejection_sample(
    draw: Callable[[int], np.ndarray], n: int, lo: int, hi: int | None, mass: float
) -> np.ndarray:
    """`n` rounded draws in [lo, hi], drawing batches sized by the acceptance rate. # (n,)"""
    upper = float(hi) if hi is not None else _NO_MAX
    kept: list[np.ndarray] = []
    have = 0
    while have < n:
        batch = min(int((n - have) / mass * 1.1) + 16, _MAX_BATCH)
        x = np.rint(draw(batch))  # (batch,)
        x = x[(x >= lo) & (x <= upper)]
        kept.append(x)
        have += len(x)
    return np.concatenate(kept)[:n].astype(np.int64)


LENGTH_SAMPLERS: dict[str, LengthSampler] = {
    "fixed": fixed_lengths,
    "uniform": uniform_lengths,
    "normal": normal_lengths,
    "lognormal": lognormal_lengths,
    "empirical": empirical_lengths,
}
