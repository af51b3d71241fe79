"""Prompt token ids without torch equal transformers' `AutoTokenizer`, template or not."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tokenizer_folders import (
    CHATML_TEMPLATE,
    LLAMA2_TEMPLATE,
    TOJSON_TEMPLATE,
    tokenizer_folder,
    zoo_tiny_tokenizer_json,
)
from transformers import AutoTokenizer

from real_backend.zoo.tokenizer import save_tokenizer
from workbench.errors import WorkbenchError
from workbench.workload.prompt_files import read_questions
from workbench.workload.prompt_tokenizer import load_prompt_tokenizer

PROMPTS = Path(__file__).resolve().parents[1] / "data" / "prompts"
# A spread of real prompts: multi-line, non-ASCII (translation), code, numbers, long.
QUESTIONS = read_questions(PROMPTS / "specbench_question.jsonl")
TEXTS = [q.turns[0] for q in QUESTIONS[::37]] + ["  leading spaces and <|eos|> inside", "é"]


def _ours(folder: Path, template: bool) -> list[list[int]]:
    return load_prompt_tokenizer(folder, field="t").encode(TEXTS, use_chat_template=template)


def _templated(folder: Path) -> list[list[int]]:
    tok = AutoTokenizer.from_pretrained(folder)
    return [
        list(
            tok.apply_chat_template(
                [{"role": "user", "content": text}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )
        for text in TEXTS
    ]


def _plain(folder: Path) -> list[list[int]]:
    tok = AutoTokenizer.from_pretrained(folder)
    return [tok(text)["input_ids"] for text in TEXTS]


def test_zoo_tiny_tokenizer_as_the_zoo_saves_it(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    save_tokenizer(Tokenizer.from_str(zoo_tiny_tokenizer_json()), tmp_path, 2048)
    assert _ours(tmp_path, template=True) == _plain(tmp_path)  # it has no chat template
    assert _ours(tmp_path, template=False) == _plain(tmp_path)


def test_bos_from_the_post_processor_when_there_is_no_template(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path, bos_post_processor=True)
    ours = _ours(folder, template=True)
    assert ours == _plain(folder)
    assert all(ids[0] == 0 and ids.count(0) == 1 for ids in ours[:-2])  # one <|bos|> (id 0)


@pytest.mark.parametrize(
    ("template", "in_file"),
    [(LLAMA2_TEMPLATE, False), (CHATML_TEMPLATE, True), (TOJSON_TEMPLATE, False)],
    ids=["llama2-config", "chatml-jinja-file", "tojson"],
)
@pytest.mark.parametrize("bos_post_processor", [False, True], ids=["plain", "bos-post"])
def test_chat_template_matches_apply_chat_template(
    tmp_path: Path, template: str, in_file: bool, bos_post_processor: bool
) -> None:
    folder = tokenizer_folder(
        tmp_path,
        chat_template=template,
        template_file=in_file,
        bos_post_processor=bos_post_processor,
    )
    ours = _ours(folder, template=True)
    assert ours == _templated(folder)
    if template != CHATML_TEMPLATE:  # the template writes BOS once, never twice
        assert all(ids[0] == 0 and ids[1] != 0 for ids in ours)


def test_chat_template_none_gives_the_plain_ids(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path, chat_template=LLAMA2_TEMPLATE)
    assert _ours(folder, template=False) == _plain(folder)


def test_a_broken_template_names_the_tokenizer(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path, chat_template="{{ raise_exception('no users here') }}")
    with pytest.raises(WorkbenchError, match="no users here") as err:
        _ours(folder, template=True)
    assert err.value.source == str(folder / "tokenizer.json")
    assert err.value.field == "chat_template"
