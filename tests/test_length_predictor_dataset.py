"""The prompts a length predictor learns from: question files once per distinct text, seeded
code snippets, and a seeded train / held-out split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from tokenizer_folders import tokenizer_folder

from real_backend.length_predictor import dataset
from workbench.workload.prompt_files import read_questions
from workbench.workload.prompt_tokenizer import load_prompt_tokenizer

PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts"


def test_question_files_give_each_distinct_first_turn_once(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path / "tok")
    files = [PROMPTS / "mt_bench.jsonl", PROMPTS / "specbench_question.jsonl"]
    prompts = dataset.question_prompts(files, folder)
    assert len(prompts) == 480  # Spec-Bench's first 80 questions are MT-bench's
    assert prompts.source[0] == "mt_bench:writing" and prompts.source[80].startswith("spec")
    text = read_questions(files[0])[0].turns[0]
    tokenizer = load_prompt_tokenizer(folder, field="test")
    assert prompts.ids[0] == tokenizer.encode([text], use_chat_template=True)[0]
    short = prompts.at_most(20)
    assert 0 < len(short) < len(prompts) and all(len(ids) <= 20 for ids in short.ids)


def test_code_snippets_are_seeded_spans_of_the_documents() -> None:
    documents = [list(range(1000, 1300)), list(range(5000, 5040)), list(range(10))]
    a, b = (dataset.code_snippets(documents, 50, seed=1) for _ in range(2))
    assert a.ids == b.ids and a.source == ["code"] * 50
    assert a.ids != dataset.code_snippets(documents, 50, seed=2).ids
    low, high = dataset.SNIPPET_TOKENS
    for ids in a.ids:
        assert low <= len(ids) <= high
        assert any(ids == doc[ids[0] - doc[0] :][: len(ids)] for doc in documents[:2])
    assert len(dataset.code_snippets(documents, 0, seed=1)) == 0


def test_the_split_is_seeded_disjoint_and_complete() -> None:
    train, heldout = dataset.split(100, seed=3, heldout_share=0.2)
    assert len(heldout) == 20 and len(train) == 80
    assert np.array_equal(np.sort(np.concatenate([train, heldout])), np.arange(100))
    again = dataset.split(100, seed=3, heldout_share=0.2)
    assert np.array_equal(again[1], heldout)
    assert not np.array_equal(dataset.split(100, seed=4, heldout_share=0.2)[1], heldout)
    other_stream = dataset.split(100, 3, 0.2, stream="predictor.validation")[1]
    assert not np.array_equal(other_stream, heldout)
