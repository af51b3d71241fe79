"""Train a length predictor: let the model answer, read its prompts, fit and pick a head.

1. prompts: question files plus held-out code snippets (`dataset`), at most
   `max_prompt_tokens` each;
2. lengths: the model answers every prompt (`lengths`: real stops, `max_new` at most);
3. features: its final hidden state of every prompt, both poolings (`features`);
4. a seeded train / held-out split; inside train a seeded fit / validation split picks the
   head kind, the pooling and the L2 strength by validation MAE; the pick is refitted on
   all of train and measured once on held-out, beside the constant predictors (the train
   mean, as the paper's baseline, and the median, the best constant for MAE).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from real_backend.length_predictor import dataset
from real_backend.length_predictor.artifact import checkpoint_digest, save_predictor
from real_backend.length_predictor.features import POOLINGS, PromptFeatures, prompt_features
from real_backend.length_predictor.heads import HEAD_KINDS, HeadConfig, LengthHead, fit_head
from real_backend.length_predictor.lengths import generate_lengths
from real_backend.length_predictor.metrics import length_errors
from real_backend.model.loading import load_checkpoint
from real_backend.serve import eos_token_ids, stop_token_ids
from workbench.errors import WorkbenchError
from workbench.seeding import component_rng

L2_GRID = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
VALIDATION_SHARE = 0.25  # of train

Log = Callable[[str], None]


@dataclass(frozen=True)
class TrainOptions:
    checkpoint: Path  # the served model's checkpoint folder
    out: Path
    prompt_files: list[Path]
    zoo: str | None = None  # its zoo name: held-out code snippets come from that corpus
    code_snippets: int = 200
    max_new: int = 256
    temperature: float = 1.0
    stop_texts: list[str] = field(default_factory=lambda: ["\n\n"])
    max_prompt_tokens: int = 1024
    heldout_share: float = 0.2
    seed: int = 0


@dataclass(frozen=True)
class Data:
    prompts: dataset.PromptSet
    lengths: np.ndarray  # (n,) int64
    features: PromptFeatures


def train_predictor(opts: TrainOptions, log: Log = lambda msg: None) -> dict[str, Any]:
    """Train, measure and save a predictor into `opts.out`; returns its card."""
    seconds: dict[str, float] = {}
    model = load_checkpoint(opts.checkpoint)  # fp32 on the CPU: the predictor's own copy
    data = _make_data(model, opts, log, seconds)
    train, heldout = dataset.split(len(data.lengths), opts.seed, opts.heldout_share)
    t0 = time.perf_counter()
    selection = _select(data, train, opts, model.args.dim)
    best = min(selection, key=lambda row: row["validation_mae"])
    cfg = HeadConfig(best["kind"], best["pooling"], model.args.dim, opts.max_new, l2=best["l2"])
    head = fit_head(cfg, *_xy(data, cfg, train), _seed(opts.seed, "predictor.head"))
    seconds["fit"] = time.perf_counter() - t0
    log(f"picked {cfg.kind} on {cfg.pooling}-pooled states, l2 {cfg.l2}")
    card = _card(opts, data, train, heldout, selection, head, seconds)
    return save_predictor(opts.out, head, card)


def _make_data(model: Any, opts: TrainOptions, log: Log, seconds: dict[str, float]) -> Data:
    prompts = _prompts(opts).at_most(opts.max_prompt_tokens)
    if len(prompts) < 20:
        raise WorkbenchError(f"only {len(prompts)} prompts: too few to train on", field="--prompts")
    stops = stop_token_ids(opts.checkpoint, opts.stop_texts) | eos_token_ids(opts.checkpoint)
    log(f"generating up to {opts.max_new} tokens for {len(prompts)} prompts")
    t0 = time.perf_counter()
    lengths = generate_lengths(
        model, prompts.ids, max_new=opts.max_new, temperature=opts.temperature,
        seed=opts.seed, stop_ids=frozenset(stops),
    )  # fmt: skip
    seconds["generate"] = time.perf_counter() - t0
    if lengths.min() == lengths.max():
        raise WorkbenchError(
            f"every response was {lengths[0]} tokens long: nothing to learn (a greedy toy "
            "model rarely stops; sample with --temperature and stop at --stop texts)",
            field="--max-new",
        )
    log("reading the prompts' hidden states")
    t0 = time.perf_counter()
    features = prompt_features(model, prompts.ids)
    seconds["features"] = time.perf_counter() - t0
    return Data(prompts, lengths, features)


def _prompts(opts: TrainOptions) -> dataset.PromptSet:
    prompts = dataset.question_prompts(opts.prompt_files, opts.checkpoint)
    if opts.zoo is not None and opts.code_snippets > 0:
        documents = dataset.zoo_heldout_documents(opts.zoo, opts.checkpoint)
        prompts = prompts + dataset.code_snippets(documents, opts.code_snippets, opts.seed)
    return prompts


def _select(data: Data, train: np.ndarray, opts: TrainOptions, dim: int) -> list[dict[str, Any]]:
    """Validation MAE of every (head kind, pooling, l2), each fitted on the fit part."""
    stream = "predictor.validation"
    fit_part, val_part = dataset.split(len(train), opts.seed, VALIDATION_SHARE, stream)
    fit_rows, val_rows = train[fit_part], train[val_part]
    rows = []
    for kind, pooling, l2 in itertools.product(HEAD_KINDS, POOLINGS, L2_GRID):
        cfg = HeadConfig(kind, pooling, dim, opts.max_new, l2=l2)
        head = fit_head(cfg, *_xy(data, cfg, fit_rows), _seed(opts.seed, "predictor.head"))
        mae = length_errors(_predict(head, data, val_rows), data.lengths[val_rows])["mae"]
        rows.append({"kind": kind, "pooling": pooling, "l2": l2, "validation_mae": mae})
    return rows


def _xy(data: Data, cfg: HeadConfig, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    index = torch.as_tensor(rows)
    return data.features.get(cfg.pooling)[index], torch.as_tensor(data.lengths[rows])


def _predict(head: LengthHead, data: Data, rows: np.ndarray) -> np.ndarray:
    features = data.features.get(head.cfg.pooling)[torch.as_tensor(rows)]
    return head.predict_tokens(features).numpy()


def _seed(seed: int, name: str) -> int:
    return int(component_rng(seed, name).integers(2**62))


def _card(
    opts: TrainOptions,
    data: Data,
    train: np.ndarray,
    heldout: np.ndarray,
    selection: list[dict[str, Any]],
    head: LengthHead,
    seconds: dict[str, float],
) -> dict[str, Any]:
    lengths, truth = data.lengths, data.lengths[heldout]
    mean, median = float(lengths[train].mean()), float(np.median(lengths[train]))
    sources = [s.split(":")[0] for s in data.prompts.source]
    return {
        "model": {"checkpoint": str(opts.checkpoint), "zoo": opts.zoo,
                  "digest": checkpoint_digest(opts.checkpoint)},
        "generation": {"max_new": opts.max_new, "temperature": opts.temperature,
                       "stop_texts": opts.stop_texts, "seed": opts.seed},
        "data": {"prompt_files": [str(p) for p in opts.prompt_files],
                 "max_prompt_tokens": opts.max_prompt_tokens, "samples": len(lengths),
                 "by_source": {s: sources.count(s) for s in sorted(set(sources))},
                 "train": len(train), "heldout": len(heldout)},
        "lengths": {"mean": float(lengths.mean()), "median": float(np.median(lengths)),
                    "at_max_new": float((lengths >= opts.max_new).mean())},
        "selection": selection,
        "heldout": {
            "learned": length_errors(_predict(head, data, heldout), truth),
            "constant_mean": {"value": mean, **length_errors(np.full(len(truth), mean), truth)},
            "constant_median": {"value": median,
                                **length_errors(np.full(len(truth), median), truth)},
        },
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "threads": torch.get_num_threads(),
    }  # fmt: skip
