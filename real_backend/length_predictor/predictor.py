"""The scenario predictor `{kind: learned}`: a trained head over the served model's reading
of each request's prompt.

It needs the prompts (`workload.prompts`) and the model the head was trained on: the
served checkpoint, checked against the card's digest (a head read through another model's
hidden states predicts nothing). With no served checkpoint (a catalog model on the
simulator, prompts tokenized by `workload.prompts.tokenizer`), the card's own checkpoint
reads them. Features are computed on the CPU in fp32, as in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from real_backend.length_predictor.artifact import checkpoint_digest, load_predictor
from real_backend.length_predictor.features import prompt_features
from real_backend.length_predictor.heads import LengthHead
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import Transformer
from workbench.errors import WorkbenchError
from workbench.scenario.length_prediction import LearnedPredictorConfig
from workbench.scheduling.length_predictors import LengthPredictor, register_predictor
from workbench.workload.requests import Workload

DEFAULT_FOLDER = "length_predictor"  # beside a zoo model's target/ and draft/


def default_predictor_folder(checkpoint: Path) -> Path:
    """Where `workbench predictor train` saves a model's predictor unless told otherwise."""
    return checkpoint.parent / DEFAULT_FOLDER


@dataclass
class LearnedPredictor(LengthPredictor):
    head: LengthHead
    model: Transformer

    def predict(self, workload: Workload) -> np.ndarray:
        if workload.prompt_ids is None:
            raise WorkbenchError(
                "the learned predictor reads each request's prompt: give workload.prompts "
                "(synthetic prompts have no content to read)",
                field="predictor",
            )
        features = prompt_features(self.model, workload.prompt_ids).get(self.head.cfg.pooling)
        return self.head.predict_tokens(features).numpy().astype(np.int64)  # (n,)


def load_learned_predictor(path: Path | None, checkpoint: Path | None) -> LearnedPredictor:
    """The predictor in `path` (default: the served zoo model's), over `checkpoint`."""
    if path is not None:
        folder = path
    elif checkpoint is not None:
        folder = default_predictor_folder(checkpoint)
    else:
        raise WorkbenchError(
            "give the trained predictor's folder (path): the model has no checkpoint folder "
            "to find it beside",
            field="predictor.path",
        )
    head, card = load_predictor(folder)
    model_folder = checkpoint if checkpoint is not None else Path(card["model"]["checkpoint"])
    if not (model_folder / "config.json").is_file():
        raise WorkbenchError(f"its model {model_folder} is gone", source=str(folder))
    if checkpoint_digest(model_folder) != card["model"]["digest"]:
        raise WorkbenchError(
            f"trained on another model ({card['model']['checkpoint']}), not the served "
            f"{model_folder}; retrain it with `workbench predictor train`",
            source=str(folder),
            field="model.digest",
        )
    return LearnedPredictor(head, load_checkpoint(model_folder))


def _learned(cfg: LearnedPredictorConfig, seed: int, checkpoint: Path | None) -> LearnedPredictor:
    return load_learned_predictor(cfg.path, checkpoint)


register_predictor("learned", _learned)
