"""The scenario predictor `{kind: learned}`: it reads each prompt with the served model, finds
the zoo model's own predictor by default, and refuses clearly what it cannot do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from decoder_models import one_thread  # noqa: E402

import real_backend.length_predictor.predictor  # noqa: E402, F401  (registers "learned")
from real_backend.length_predictor.artifact import load_predictor  # noqa: E402
from real_backend.length_predictor.features import prompt_features  # noqa: E402
from real_backend.model.loading import load_checkpoint  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.scenario.admission import ShortestPredictedAdmission  # noqa: E402
from workbench.scenario.length_prediction import LearnedPredictorConfig  # noqa: E402
from workbench.scenario.seqsched import SequenceSchedulingConfig  # noqa: E402
from workbench.scenario.system import ContinuousBatchingConfig  # noqa: E402
from workbench.scheduling.length_predictors import build_predictor, with_predictions  # noqa: E402
from workbench.workload.requests import Workload  # noqa: E402

one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)

LEARNED = LearnedPredictorConfig(kind="learned")
PROMPTS = [[5, 6, 7, 8, 9], [40, 41], [100, 7, 100, 7, 3, 3]]


def workload(prompts: list[list[int]] | None = PROMPTS) -> Workload:
    n = 3
    return Workload(
        arrival_s=np.zeros(n),
        prompt_tokens=np.array([5, 2, 6]),
        output_tokens=np.full(n, 64),
        prompt_ids=prompts,
    )


def test_predictions_are_the_heads_reading_of_each_prompt(
    tiny_predictor: Path, tiny_zoo: Path
) -> None:
    checkpoint = tiny_zoo / "tiny" / "target"
    predicted = build_predictor(LEARNED, 0, checkpoint).predict(workload())
    head, _ = load_predictor(tiny_predictor)
    features = prompt_features(load_checkpoint(checkpoint), PROMPTS).get(head.cfg.pooling)
    assert predicted.dtype == np.int64
    assert predicted.tolist() == head.predict_tokens(features).tolist()
    explicit = LearnedPredictorConfig(kind="learned", path=tiny_predictor)
    assert build_predictor(explicit, 0, None).predict(workload()).tolist() == predicted.tolist()


def test_synthetic_prompts_are_refused_naming_the_scheduler_field(
    tiny_predictor: Path, tiny_zoo: Path
) -> None:
    checkpoint = tiny_zoo / "tiny" / "target"
    seqsched = SequenceSchedulingConfig(kind="sequence_scheduling", predictor=LEARNED)
    with pytest.raises(WorkbenchError, match=r"scheduler\.predictor: .*workload\.prompts"):
        with_predictions(workload(None), seqsched, 0, checkpoint)
    admission = ShortestPredictedAdmission(kind="shortest_predicted", predictor=LEARNED)
    continuous = ContinuousBatchingConfig(kind="continuous", admission=admission)
    with pytest.raises(WorkbenchError, match=r"scheduler\.admission\.predictor: "):
        with_predictions(workload(None), continuous, 0, checkpoint)


def test_an_untrained_model_names_the_train_command(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    with pytest.raises(WorkbenchError, match="workbench predictor train"):
        build_predictor(LEARNED, 0, tmp_path / "target")
    with pytest.raises(WorkbenchError, match=r"predictor\.path"):
        build_predictor(LEARNED, 0, None)  # a catalog model: no folder to look beside


def test_a_head_trained_on_another_model_is_refused(
    tiny_predictor: Path, tiny_zoo: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other" / "target"
    shutil.copytree(tiny_zoo / "tiny" / "target", other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-6}))
    explicit = LearnedPredictorConfig(kind="learned", path=tiny_predictor)
    with pytest.raises(WorkbenchError, match="trained on another model"):
        build_predictor(explicit, 0, other)
