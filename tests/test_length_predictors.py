"""Length predictors: the oracle field, a constant, and a seeded noisy oracle; predictions
are attached only for schedulers that use them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from workbench.errors import WorkbenchError
from workbench.scenario.admission import FcfsAdmission, ShortestPredictedAdmission
from workbench.scenario.length_prediction import (
    ConstantPredictorConfig,
    NoisyOraclePredictorConfig,
    OraclePredictorConfig,
)
from workbench.scenario.seqsched import SequenceSchedulingConfig
from workbench.scenario.system import ContinuousBatchingConfig, StaticBatchingConfig
from workbench.scheduling.length_predictors import build_predictor, with_predictions
from workbench.workload.requests import Workload

ORACLE = OraclePredictorConfig(kind="oracle")


def workload(n: int = 1000, oracle: bool = True) -> Workload:
    rng = np.random.default_rng(0)
    output = rng.integers(1, 400, size=n)
    return Workload(
        arrival_s=np.zeros(n),
        prompt_tokens=np.full(n, 16),
        output_tokens=output,
        oracle_tokens=output + rng.integers(0, 50, size=n) if oracle else None,
    )


def noisy(**fields: object) -> NoisyOraclePredictorConfig:
    return NoisyOraclePredictorConfig(kind="noisy_oracle", **fields)  # type: ignore[arg-type]


def test_oracle_reads_the_oracle_field_else_the_true_length() -> None:
    w = workload()
    assert np.array_equal(build_predictor(ORACLE, 0).predict(w), w.oracle_tokens)
    plain = workload(oracle=False)
    assert np.array_equal(build_predictor(ORACLE, 0).predict(plain), plain.output_tokens)


def test_constant() -> None:
    cfg = ConstantPredictorConfig(kind="constant", value=128)
    assert set(build_predictor(cfg, 0).predict(workload(10)).tolist()) == {128}


def test_noisy_oracle_without_noise_is_the_oracle() -> None:
    w = workload()
    assert np.array_equal(build_predictor(noisy(spread=0.0), 3).predict(w), w.oracle_tokens)


def test_noisy_oracle_is_seeded_and_has_the_configured_error() -> None:
    w = workload(20_000)
    cfg = noisy(bias=0.2, spread=0.3)
    a = build_predictor(cfg, 1).predict(w)
    assert np.array_equal(a, build_predictor(cfg, 1).predict(w))
    assert not np.array_equal(a, build_predictor(cfg, 2).predict(w))
    log_error = np.log(a / w.oracle_tokens)
    assert np.median(log_error) == pytest.approx(np.log(1.2), abs=0.02)  # median × (1 + bias)
    assert np.std(log_error) == pytest.approx(0.3, abs=0.03)  # rounding adds a little
    assert a.min() >= 1 and a.dtype == np.int64


def test_noisy_oracle_rounds_up_to_buckets() -> None:
    w = workload()
    plain = build_predictor(noisy(spread=0.4), 5).predict(w)
    bucketed = build_predictor(noisy(spread=0.4, bucket_tokens=50), 5).predict(w)
    assert set((bucketed % 50).tolist()) == {0}
    assert np.all(bucketed >= plain) and np.all(bucketed - plain <= 50)  # same draws, rounded up


def test_noisy_oracle_never_predicts_beyond_its_max() -> None:
    w = workload()
    free = build_predictor(noisy(spread=1.0, bucket_tokens=50), 5).predict(w)
    capped = build_predictor(noisy(spread=1.0, bucket_tokens=50, max_tokens=550), 5).predict(w)
    assert free.max() > 550 and capped.max() == 550
    assert np.array_equal(capped, np.minimum(free, 550))  # same draws, clipped


def test_predictions_only_for_schedulers_that_use_them() -> None:
    w = workload(50)
    seqsched = SequenceSchedulingConfig(kind="sequence_scheduling")
    assert np.array_equal(with_predictions(w, seqsched, 0).predicted_tokens, w.oracle_tokens)
    spf = ContinuousBatchingConfig(
        kind="continuous", admission=ShortestPredictedAdmission(kind="shortest_predicted")
    )
    assert with_predictions(w, spf, 0).predicted_tokens is not None
    fcfs = ContinuousBatchingConfig(kind="continuous", admission=FcfsAdmission(kind="fcfs"))
    assert with_predictions(w, fcfs, 0) is w
    assert with_predictions(w, StaticBatchingConfig(kind="static"), 0) is w


def test_given_predictions_are_kept() -> None:
    w = workload(5)
    given = Workload(**{**w.__dict__, "predicted_tokens": np.arange(1, 6)})
    out = with_predictions(given, SequenceSchedulingConfig(kind="sequence_scheduling"), 0)
    assert np.array_equal(out.predicted_tokens, np.arange(1, 6))


def test_an_unregistered_predictor_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.scenario.length_prediction import LearnedPredictorConfig
    from workbench.scheduling import length_predictors

    monkeypatch.delitem(length_predictors.PREDICTORS, "learned", raising=False)
    with pytest.raises(WorkbenchError, match="comes with the real backend") as error:
        build_predictor(LearnedPredictorConfig(kind="learned"), 0)
    assert error.value.field == "predictor.kind"


def test_the_core_leaves_the_learned_predictor_to_the_real_backend_until_asked() -> None:
    pytest.importorskip("torch")
    check = """
import sys
from workbench.plugins import load_predictor_plugin
from workbench.scenario.length_prediction import LearnedPredictorConfig
from workbench.scenario.seqsched import SequenceSchedulingConfig
from workbench.scheduling.length_predictors import PREDICTORS
assert "learned" not in PREDICTORS and "real_backend" not in sys.modules
learned = LearnedPredictorConfig(kind="learned")
load_predictor_plugin(SequenceSchedulingConfig(kind="sequence_scheduling", predictor=learned))
assert "learned" in PREDICTORS
"""
    subprocess.run([sys.executable, "-c", check], check=True)
