"""Arrival processes: rates, burstiness, no clipping, trace replay, closed loop."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.scenario.workload import (
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
    TraceArrivals,
)
from workbench.seeding import component_rng
from workbench.workload.arrivals import sample_arrivals

CONV_TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "splitwise_conv.csv"
N = 200_001  # 200,000 gaps
Z = 5.0  # tolerance in standard errors: a false failure has probability < 1e-6


def _gaps(config: object, seed: int = 7) -> np.ndarray:
    arrivals = sample_arrivals(config, N, component_rng(seed, "test.arrival"))  # type: ignore[arg-type]
    assert arrivals.arrival_s[0] == 0.0
    return np.diff(arrivals.arrival_s)  # (N-1,)


def _gamma_gap_moments(rate: float, cv: float) -> tuple[float, float, float, float]:
    """Mean, variance, third and fourth central moments of Gamma(k = 1/cv², θ = cv²/rate)."""
    k, theta = 1.0 / cv**2, cv**2 / rate
    return k * theta, k * theta**2, 2 * k * theta**3, 3 * k * (k + 2) * theta**4


def _standard_errors(m: float, var: float, mu3: float, mu4: float, n: int) -> tuple[float, float]:
    """Standard errors of the sample mean and of the sample CV = s / x̄ of n i.i.d. gaps.

    mean: SE = σ / √n.
    CV (delta method on (x̄, s²), with Var s² ≈ (μ4 − σ⁴)/n and Cov(x̄, s²) ≈ μ3/n):
        Var(CV̂) ≈ [ (μ4 − σ⁴) / (4 σ² m²)  −  μ3 / m³  +  σ⁴ / m⁴ ] / n
    """
    se_mean = math.sqrt(var / n)
    var_cv = ((mu4 - var**2) / (4 * var * m**2) - mu3 / m**3 + var**2 / m**4) / n
    return se_mean, math.sqrt(var_cv)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_rate_and_cv_match_within_sampling_error(cv: float) -> None:
    rate = 4.0
    gaps = _gaps(GammaArrivals(kind="gamma", rate_per_s=rate, cv=cv))
    m, var, mu3, mu4 = _gamma_gap_moments(rate, cv)
    se_mean, se_cv = _standard_errors(m, var, mu3, mu4, len(gaps))
    assert abs(gaps.mean() - 1 / rate) < Z * se_mean
    assert abs(gaps.std() / gaps.mean() - cv) < Z * se_cv


def test_poisson_rate_and_cv_match_within_sampling_error() -> None:
    rate = 25.0
    gaps = _gaps(PoissonArrivals(kind="poisson", rate_per_s=rate))
    m, var, mu3, mu4 = _gamma_gap_moments(rate, 1.0)  # exponential = gamma with k = 1
    se_mean, se_cv = _standard_errors(m, var, mu3, mu4, len(gaps))
    assert abs(gaps.mean() - 1 / rate) < Z * se_mean
    assert abs(gaps.std() / gaps.mean() - 1.0) < Z * se_cv


def test_poisson_gaps_are_not_clipped() -> None:
    rate = 2.0
    gaps = _gaps(PoissonArrivals(kind="poisson", rate_per_s=rate))
    n = len(gaps)
    # P(max < 9/rate) = (1 − e⁻⁹)ⁿ ≈ e^(−24.7); P(min > 10⁻³/rate) = e^(−n/1000) = e^(−200).
    assert gaps.max() > 9 / rate
    assert gaps.min() < 1e-3 / rate
    # The tail beyond 5 mean gaps holds e⁻⁵ of the gaps (binomial SE √(p(1−p)/n)).
    p = math.exp(-5.0)
    assert abs((gaps > 5 / rate).mean() - p) < Z * math.sqrt(p * (1 - p) / n)


def test_constant_gaps_are_exact() -> None:
    rate = 3.0
    gaps = _gaps(ConstantArrivals(kind="constant", rate_per_s=rate))
    np.testing.assert_allclose(gaps, 1 / rate, rtol=1e-9)


def test_streams_start_at_zero_and_never_go_back() -> None:
    for config in (
        PoissonArrivals(kind="poisson", rate_per_s=1.0),
        GammaArrivals(kind="gamma", rate_per_s=1.0, cv=3.0),
        ConstantArrivals(kind="constant", rate_per_s=1.0),
    ):
        arrival_s = sample_arrivals(config, 1000, component_rng(0, "a")).arrival_s  # (1000,)
        assert arrival_s.shape == (1000,) and arrival_s.dtype == np.float64
        assert arrival_s[0] == 0.0 and np.all(np.diff(arrival_s) >= 0)


def test_single_request_arrives_at_zero() -> None:
    config = PoissonArrivals(kind="poisson", rate_per_s=1.0)
    assert sample_arrivals(config, 1, component_rng(0, "a")).arrival_s.tolist() == [0.0]


# ------------------------------------------------------------------ traces


def _file_times(path: Path) -> np.ndarray:
    with open(path, newline="") as fh:
        return np.array([float(row["arrived_at"]) for row in csv.DictReader(fh)])


def _trace(path: Path, **kw: object) -> TraceArrivals:
    return TraceArrivals(kind="trace", path=path, **kw)  # type: ignore[arg-type]


def test_trace_reproduces_the_file_gaps() -> None:
    times = _file_times(CONV_TRACE)  # (m,)
    n = len(times)
    arrival_s = sample_arrivals(_trace(CONV_TRACE), n, component_rng(0, "a")).arrival_s
    np.testing.assert_allclose(arrival_s, times - times[0], rtol=0, atol=1e-9)
    half = sample_arrivals(_trace(CONV_TRACE, time_scale=0.5), n, component_rng(0, "a")).arrival_s
    np.testing.assert_allclose(np.diff(half), 0.5 * np.diff(times), rtol=1e-9, atol=1e-12)


def test_trace_in_ms_is_shifted_to_zero_and_converted(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("t_ms,x\n1000,1\n1500,2\n4000,3\n")
    config = _trace(path, column="t_ms", time_unit="ms")
    arrival_s = sample_arrivals(config, 3, component_rng(0, "a")).arrival_s
    np.testing.assert_allclose(arrival_s, [0.0, 0.5, 3.0])


def test_short_trace_repeats_its_gap_pattern(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrived_at\n10\n11\n14\n")  # gaps 1, 3; span 4; mean gap 2
    arrival_s = sample_arrivals(_trace(path), 7, component_rng(0, "a")).arrival_s
    # After the last arrival: one mean gap, then the gaps again (period = 4 + 2).
    np.testing.assert_allclose(arrival_s, [0, 1, 4, 6, 7, 10, 12])


def test_trace_going_back_in_time_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrived_at\n0\n2\n1\n")
    with pytest.raises(WorkbenchError) as err:
        sample_arrivals(_trace(path), 3, component_rng(0, "a"))
    assert str(path) in str(err.value) and "arrived_at" in str(err.value)
    assert "line 4" in str(err.value)


# ------------------------------------------------------------------ closed loop


def test_closed_loop_has_no_arrival_times_and_carries_the_clients() -> None:
    config = ClosedLoopArrivals(kind="closed_loop", concurrency=8, think_time_s=0.25)
    arrivals = sample_arrivals(config, 50, component_rng(0, "a"))
    assert arrivals.arrival_s.shape == (50,) and np.isnan(arrivals.arrival_s).all()
    assert arrivals.closed_loop_concurrency == 8
    assert arrivals.think_time_s == 0.25


def test_poisson_gaps_can_be_capped_as_vidur_does() -> None:
    config = PoissonArrivals(kind="poisson", rate_per_s=2.0, max_gap_mean_gaps=3.0)
    gaps = _gaps(config)
    assert gaps.max() == pytest.approx(1.5)  # 3 mean gaps of 0.5 s: many gaps reach the cap
    expected_mean = (1 - math.exp(-3.0)) / 2.0  # E[min(X, 3/λ)] = (1 − e^-3) / λ
    assert gaps.mean() == pytest.approx(expected_mean, rel=Z * gaps.std() / gaps.mean() / N**0.5)
    uncapped = _gaps(PoissonArrivals(kind="poisson", rate_per_s=2.0))
    assert np.allclose(np.minimum(uncapped, 1.5), gaps, rtol=0, atol=1e-9)  # same draws, clipped
