"""The prompts a length predictor learns from: real questions and code snippets.

Question files (`data/prompts/*.jsonl`) give each question's first turn, tokenized as a
scenario's `workload.prompts` would (the model's tokenizer, its chat template when it has
one), identical texts once. The zoo models are code models, so snippets of the zoo's own
held-out source files (never trained on) add in-distribution prompts: random spans, from
the generator "predictor.code_snippets". The train / held-out split is a seeded
permutation ("predictor.split"), so the same seed always holds out the same prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.seeding import component_rng
from workbench.workload.prompt_files import read_questions
from workbench.workload.prompt_tokenizer import load_prompt_tokenizer

SNIPPET_TOKENS = (16, 128)  # a code snippet's length range (inclusive)


@dataclass(frozen=True)
class PromptSet:
    ids: list[list[int]]  # per prompt: token ids
    source: list[str]  # per prompt: "<file stem>:<category>" or "code"

    def __len__(self) -> int:
        return len(self.ids)

    def __add__(self, other: PromptSet) -> PromptSet:
        return PromptSet(self.ids + other.ids, self.source + other.source)

    def at_most(self, max_tokens: int) -> PromptSet:
        """Only the prompts of at most `max_tokens` tokens."""
        keep = [i for i, ids in enumerate(self.ids) if len(ids) <= max_tokens]
        return PromptSet([self.ids[i] for i in keep], [self.source[i] for i in keep])


def question_prompts(files: list[Path], tokenizer_folder: Path) -> PromptSet:
    """The first turn of every question of `files`, each distinct text once, in file order."""
    tokenizer = load_prompt_tokenizer(tokenizer_folder, field="--checkpoint")
    seen: set[str] = set()
    texts, source = [], []
    for path in files:
        for question in read_questions(path):
            text = question.turns[0]
            if text not in seen:
                seen.add(text)
                texts.append(text)
                source.append(f"{path.stem}:{question.category}")
    return PromptSet(tokenizer.encode(texts, use_chat_template=True), source)


def code_snippets(documents: list[list[int]], n: int, seed: int) -> PromptSet:
    """`n` random spans of the token documents (each long enough), from a seeded stream."""
    rng = component_rng(seed, "predictor.code_snippets")
    low, high = SNIPPET_TOKENS
    usable = [doc for doc in documents if len(doc) >= low]
    if n == 0 or not usable:
        return PromptSet([], [])
    weights = np.array([len(doc) for doc in usable], dtype=np.float64)  # (d,)
    picks = rng.choice(len(usable), size=n, p=weights / weights.sum())  # (n,)
    ids = []
    for doc_index in picks:
        doc = usable[doc_index]
        length = int(rng.integers(low, min(high, len(doc)) + 1))
        start = int(rng.integers(0, len(doc) - length + 1))
        ids.append(doc[start : start + length])
    return PromptSet(ids, ["code"] * n)


def zoo_heldout_documents(name: str, tokenizer_folder: Path) -> list[list[int]]:
    """The zoo entry's held-out corpus files as token ids (the model never trained on them)."""
    from real_backend.zoo.corpus import build_corpus
    from real_backend.zoo.specs import get_spec

    spec = get_spec(name)
    corpus = build_corpus(spec.train_bytes, spec.heldout_bytes)
    tokenizer = load_prompt_tokenizer(tokenizer_folder, field="--model-zoo").tokenizer
    return [e.ids for e in tokenizer.encode_batch(list(corpus.heldout), add_special_tokens=False)]


def split(
    n: int, seed: int, heldout_share: float, stream: str = "predictor.split"
) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) indices of n samples, each sorted, from the generator `stream`.
    # (n - k,), (k,)"""
    order = component_rng(seed, stream).permutation(n)
    k = max(1, round(n * heldout_share))
    return np.sort(order[k:]), np.sort(order[:k])
