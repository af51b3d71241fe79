"""Real prompts for a workload: which question each request asks, as model token ids.

Questions are filtered by category, taken in file order or in a seeded random order (a
fresh permutation for every pass over them, from the generator "workload.prompt_order"),
cycling when there are more requests than questions. Each selected turn is tokenized once
with the model's tokenizer (`prompt_tokenizer.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.errors import WorkbenchError
from workbench.scenario.workload import PromptsConfig
from workbench.seeding import component_rng
from workbench.workload.prompt_files import Question, read_questions
from workbench.workload.prompt_tokenizer import TOKENIZER_FILE, load_prompt_tokenizer

FIELD = "workload.prompts"


@dataclass(frozen=True)
class PromptDraw:
    ids: list[list[int]]  # per request: its prompt's token ids
    category: np.ndarray  # (n,) object: each request's question category


def draw_prompts(
    config: PromptsConfig, n: int, seed: int, model_tokenizer: Path | None
) -> PromptDraw:
    """The prompts of n requests; `model_tokenizer` is the model's folder (None: it has none)."""
    questions = select_questions(config)
    order = question_order(config, len(questions), n, seed)  # (n,)
    tokenizer = load_prompt_tokenizer(
        _tokenizer_path(config, model_tokenizer), field=f"{FIELD}.tokenizer"
    )
    texts = [q.turns[config.turn] for q in questions]
    ids = tokenizer.encode(texts, use_chat_template=config.chat_template == "auto")
    empty = next((i for i, toks in enumerate(ids) if not toks), None)
    if empty is not None:
        raise WorkbenchError(
            f"question {questions[empty].question_id} tokenizes to no tokens",
            source=str(config.file),
            field=f"{FIELD}.turn",
        )
    category = np.array([q.category for q in questions], dtype=object)  # (m,)
    return PromptDraw(ids=[ids[i] for i in order], category=category[order])


def select_questions(config: PromptsConfig) -> list[Question]:
    """The file's questions in the wanted categories, each of which must have the turn."""
    questions = list(read_questions(config.file))
    source = str(config.file)
    if config.categories is not None:
        known = list(dict.fromkeys(q.category for q in questions))
        unknown = [c for c in config.categories if c not in known]
        if unknown:
            raise WorkbenchError(
                f"unknown category {unknown[0]!r}; the file has {', '.join(known)}",
                source=source,
                field=f"{FIELD}.categories",
            )
        wanted = set(config.categories)
        questions = [q for q in questions if q.category in wanted]
    short = [q for q in questions if config.turn >= len(q.turns)]
    if short:
        raise WorkbenchError(
            f"turn {config.turn} is out of range: {len(short)} of {len(questions)} selected "
            f"questions have fewer turns (e.g. question {short[0].question_id}, "
            f"{short[0].category}, {len(short[0].turns)} turn(s))",
            source=source,
            field=f"{FIELD}.turn",
        )
    return questions


def question_order(config: PromptsConfig, m: int, n: int, seed: int) -> np.ndarray:
    """Which of the m selected questions each of the n requests asks. # (n,)"""
    if config.order == "file":
        return np.arange(n) % m
    rng = component_rng(seed, "workload.prompt_order")
    passes = -(-n // m)  # ceil(n / m)
    return np.concatenate([rng.permutation(m) for _ in range(passes)])[:n]


def _tokenizer_path(config: PromptsConfig, model_tokenizer: Path | None) -> Path:
    """The section's own tokenizer when named, else the model's folder (which must have one)."""
    if config.tokenizer is not None:
        return config.tokenizer
    if model_tokenizer is None:
        missing = "the model has none (a catalog model)"
    elif not (model_tokenizer / TOKENIZER_FILE).is_file():
        missing = f"the model's folder {model_tokenizer} has no {TOKENIZER_FILE}"
    else:
        return model_tokenizer
    raise WorkbenchError(
        f"needs a tokenizer to tokenize the prompts, and {missing}: give a checkpoint folder "
        f"with a {TOKENIZER_FILE} (model.config_path or model.zoo) or name one in "
        f"{FIELD}.tokenizer (a folder or {TOKENIZER_FILE})",
        field=FIELD,
    )
