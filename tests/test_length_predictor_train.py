"""`workbench predictor train` on the zoo `tiny`: the model answers real and code prompts,
a head is picked on validation data, and the card reports its held-out errors beside the
constant baselines; the saved predictor loads back exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from decoder_models import one_thread  # noqa: E402

from real_backend.length_predictor.artifact import checkpoint_digest, load_predictor  # noqa: E402
from real_backend.length_predictor.features import prompt_features  # noqa: E402
from workbench.cli import main  # noqa: E402

one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


def card_of(folder: Path) -> dict:
    return json.loads((folder / "card.json").read_text())


def test_the_card_reports_held_out_errors_against_constant_baselines(
    tiny_predictor: Path, tiny_zoo: Path
) -> None:
    card = card_of(tiny_predictor)
    assert card["data"]["samples"] == 80 + 40  # MT-bench questions and code snippets
    assert card["data"]["by_source"] == {"code": 40, "mt_bench": 80}
    assert card["data"]["train"] + card["data"]["heldout"] == 120
    for name in ("learned", "constant_mean", "constant_median"):
        errors = card["heldout"][name]
        assert errors["mae"] >= 0 and 0 <= errors["within_50"] <= errors["within_100"] <= 1
    assert len(card["selection"]) == 2 * 2 * 6  # head kinds × poolings × L2 strengths
    best = min(card["selection"], key=lambda row: row["validation_mae"])
    assert (card["head"]["kind"], card["head"]["pooling"]) == (best["kind"], best["pooling"])
    assert card["model"]["digest"] == checkpoint_digest(tiny_zoo / "tiny" / "target")
    assert card["generation"] == {
        "max_new": 64, "temperature": 1.0, "stop_texts": ["\n\n"], "seed": 0
    }  # fmt: skip


def test_the_saved_head_loads_back_exactly(tiny_predictor: Path, tiny_zoo: Path) -> None:
    from real_backend.model.loading import load_checkpoint

    head, card = load_predictor(tiny_predictor)
    model = load_checkpoint(tiny_zoo / "tiny" / "target")
    features = prompt_features(model, [[5, 6, 7, 8], [9, 10]]).get(head.cfg.pooling)
    tokens = head.predict_tokens(features)
    assert tokens.shape == (2,) and int(tokens.min()) >= 1 and int(tokens.max()) <= 64
    assert card["head"]["max_new"] == 64


def test_training_is_reproducible(tiny_predictor: Path, tiny_zoo: Path, tmp_path: Path) -> None:
    args = ["predictor", "train", "--model-zoo", "tiny", "--zoo-dir", str(tiny_zoo),
            "--prompts", str(Path(card_of(tiny_predictor)["data"]["prompt_files"][0])),
            "--code-snippets", "40", "--max-new", "64", "--out", str(tmp_path / "again"),
            "--json"]  # fmt: skip
    assert main(args) == 0
    first, again = card_of(tiny_predictor), card_of(tmp_path / "again")
    assert again["heldout"] == first["heldout"] and again["selection"] == first["selection"]


def test_bad_input_is_one_line_naming_the_option(tmp_path: Path, capsys) -> None:
    empty = ["predictor", "train", "--model-zoo", "tiny", "--zoo-dir", str(tmp_path / "no")]
    assert main(empty) == 2
    err = capsys.readouterr().err
    assert "--model-zoo" in err and "workbench zoo build tiny" in err and err.count("\n") == 1
    assert main([*empty, "--max-new", "0"]) == 2
    assert "--max-new: expected a whole number of 1 or more, got 0" in capsys.readouterr().err
