"""Length distributions: moments against parameters, truncation, empirical sampling."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.scenario.workload import (
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    NormalLength,
    UniformLength,
)
from workbench.seeding import component_rng
from workbench.workload.lengths import sample_lengths

DATA = Path(__file__).resolve().parents[1] / "data"
ALPACA_JSON = DATA / "seqsched" / "alpaca-val-10k-length.json"
ALPACA_CSV = DATA / "seqsched" / "alpaca-val-10k-length.csv"
N = 200_000
Z = 5.0  # tolerance in standard errors: a false failure has probability < 1e-6


def _sample(config: object, n: int = N, seed: int = 3) -> np.ndarray:
    x = sample_lengths(config, n, component_rng(seed, "test.lengths"))  # type: ignore[arg-type]
    assert x.shape == (n,) and x.dtype == np.int64 and x.min() >= 1
    return x


def _assert_moments(x: np.ndarray, mean: float, var: float, mu4: float) -> None:
    """Sample mean and std within Z standard errors of the true ones.

    SE(mean) = σ/√n.  SE(std) ≈ √((μ4 − σ⁴)/n) / (2σ)  (delta method on s² → s).
    """
    n, std = len(x), math.sqrt(var)
    assert abs(x.mean() - mean) < Z * std / math.sqrt(n)
    assert abs(x.std() - std) < Z * math.sqrt((mu4 - var**2) / n) / (2 * std)


def _pmf_moments(k: np.ndarray, p: np.ndarray) -> tuple[float, float, float]:
    """Mean, variance and fourth central moment of a pmf p over integers k."""
    p = p / p.sum()
    mean = float((k * p).sum())
    d = k - mean
    return mean, float((d**2 * p).sum()), float((d**4 * p).sum())


_erf = np.vectorize(math.erf)


def _normal_cdf(x: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    return 0.5 * (1 + _erf((x - mu) / (sigma * math.sqrt(2))))


def _rounded_pmf(lo: int, hi: int, cdf: object) -> tuple[np.ndarray, np.ndarray]:
    """P(round(X) = k) for k in [lo, hi], from X's cdf; the truncated, rounded law."""
    k = np.arange(lo, hi + 1, dtype=np.float64)  # (hi-lo+1,)
    return k, cdf(k + 0.5) - cdf(k - 0.5)  # type: ignore[operator]


# ------------------------------------------------------------------ parametric


def test_fixed_is_constant() -> None:
    assert np.all(_sample(FixedLength(kind="fixed", value=128), n=1000) == 128)


def test_uniform_covers_its_range_with_the_right_moments() -> None:
    x = _sample(UniformLength(kind="uniform", low=10, high=60))
    assert x.min() == 10 and x.max() == 60
    k = np.arange(10, 61, dtype=np.float64)
    _assert_moments(x, *_pmf_moments(k, np.ones_like(k)))


def test_normal_matches_its_mean_and_std() -> None:
    x = _sample(NormalLength(kind="normal", mean=500, std=100))  # truncation at 1: 5σ away
    # Rounding adds variance 1/12; a normal's μ4 = 3σ⁴.
    var = 100.0**2 + 1 / 12
    _assert_moments(x, 500.0, var, 3 * var**2)


def test_lognormal_matches_its_mean_and_std() -> None:
    mean, std = 200.0, 150.0
    x = _sample(LognormalLength(kind="lognormal", mean=mean, std=std))
    # Moments of the lognormal (the draws below 0.5 that min = 1 rejects have mass < 1e-15).
    s2 = math.log(1 + (std / mean) ** 2)
    kurtosis = math.exp(4 * s2) + 2 * math.exp(3 * s2) + 3 * math.exp(2 * s2) - 3
    var = std**2 + 1 / 12
    _assert_moments(x, mean, var, kurtosis * std**4)


def test_truncated_normal_is_the_normal_conditioned_on_the_range() -> None:
    config = NormalLength(kind="normal", mean=100, std=80, min=50, max=150)
    x = _sample(config)
    assert x.min() == 50 and x.max() == 150  # truncated, and both bounds reachable
    k, p = _rounded_pmf(50, 150, lambda v: _normal_cdf(v, 100.0, 80.0))
    _assert_moments(x, *_pmf_moments(k, p))
    # Redrawn, not clipped: the bounds hold no pile of mass.
    assert (x == 50).mean() < 2 * p[0] / p.sum()


def test_truncated_lognormal_is_the_lognormal_conditioned_on_the_range() -> None:
    mean, std, lo, hi = 300.0, 400.0, 20, 1000
    x = _sample(LognormalLength(kind="lognormal", mean=mean, std=std, min=lo, max=hi))
    assert x.min() == lo and x.max() == hi
    s2 = math.log(1 + (std / mean) ** 2)
    mu, sigma = math.log(mean) - s2 / 2, math.sqrt(s2)
    k, p = _rounded_pmf(lo, hi, lambda v: _normal_cdf(np.log(v), mu, sigma))
    _assert_moments(x, *_pmf_moments(k, p))


def test_normal_with_zero_std_is_its_rounded_mean() -> None:
    assert np.all(_sample(NormalLength(kind="normal", mean=99.6, std=0), n=100) == 100)


def test_a_range_the_distribution_cannot_reach_is_an_error() -> None:
    config = NormalLength(kind="normal", mean=100, std=5, min=400)
    with pytest.raises(WorkbenchError, match=r"min, max"):
        sample_lengths(config, 10, component_rng(0, "x"), field="workload.prompt_tokens")


# ------------------------------------------------------------------ empirical


def _json_column(key: str) -> np.ndarray:
    return np.array([r[key] for r in json.loads(ALPACA_JSON.read_text())])


def test_empirical_json_samples_only_column_values_and_respects_max() -> None:
    column = _json_column("L_t0.0")  # (10000,)
    allowed = column[column <= 400]
    config = EmpiricalLength(kind="empirical", path=ALPACA_JSON, column="L_t0.0", max=400)
    x = _sample(config)
    assert set(np.unique(x)) <= set(allowed.tolist())
    assert x.max() <= 400
    # Sampling with replacement: each draw has the column's mean and variance.
    var = allowed.var()
    _assert_moments(x, allowed.mean(), var, float(((allowed - allowed.mean()) ** 4).mean()))


def test_empirical_csv_column() -> None:
    with open(ALPACA_CSV, newline="") as fh:
        column = {int(r["L_gt"]) for r in csv.DictReader(fh)}
    x = _sample(EmpiricalLength(kind="empirical", path=ALPACA_CSV, column="L_gt"), n=5000)
    assert set(x.tolist()) <= column


def test_empirical_max_below_every_value_is_an_error() -> None:
    config = EmpiricalLength(kind="empirical", path=ALPACA_JSON, column="L_t0.0", max=2)
    with pytest.raises(WorkbenchError) as err:
        sample_lengths(config, 10, component_rng(0, "x"))
    assert str(ALPACA_JSON) in str(err.value) and "L_t0.0" in str(err.value)
