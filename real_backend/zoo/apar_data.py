"""Structured training data for the APAR zoo models, from the Python standard library.

Every machine has the stdlib's sources, and their docstrings are real text with a real
hierarchy: a module's public functions (or classes, or a class's methods) are a numbered
list whose items each have a docstring. A request asks for such a list ("Describe the
functions of `json`."); the answer's skeleton numbers the names and leaves a fork token
where each detail (the docstring's first paragraph) belongs:

    1. `dumps`:[Fork]
    2. `loads`:[Fork]<EOS>

As in APAR's released training data, each answer becomes 1 + k ordinary causal sequences:
the main one (prompt → skeleton with fork tokens → EOS; loss on the skeleton) and one per
item (prompt → skeleton up to that item's fork token → child token → detail → EOS; loss
only after the child token). A seeded share of the training lists (`inline_share`: half
for `apar-small`, a quarter for `apar-tiny`) is also written sequentially (prompt →
"1. `dumps`: detail\n2. ..." → EOS), as the released model's base model would: banned from
forking, the model then writes the details inline, so the fork-banned run is a vanilla
baseline of similar text. An inline answer longer than a training row is cut into
overlapping windows, so that long lists too are written inline to their EOS. Lists are
parsed with `ast` (nothing is imported) and split into train / held-out by the same hash of
the file path as the code corpus, so a held-out module is never seen in either form.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
from dataclasses import dataclass
from pathlib import Path

from real_backend.zoo.corpus import candidate_files, is_heldout
from real_backend.zoo.specs import AparSpec

FORK, CHILD = "[Fork]", "[Child]"
MIN_ITEMS = 2
MAX_DETAIL_CHARS = 160
# Tokens a continuation window repeats from the one before, without loss: about two items.
WINDOW_CONTEXT = 48


@dataclass(frozen=True)
class DocList:
    """A numbered list: what it describes and its (name, detail) items, in source order."""

    subject: str  # e.g. "functions of `json`"
    items: tuple[tuple[str, str], ...]
    heldout: bool

    @property
    def prompt(self) -> str:
        return f"Describe the {self.subject}.\n"


def doc_lists(root: Path, max_items: int) -> list[DocList]:
    """Every list of at least MIN_ITEMS public, documented names in the stdlib under `root`,
    cut to its first `max_items` items, in file order."""
    lists: list[DocList] = []
    for rel in candidate_files(root):
        try:
            module = ast.parse((root / rel).read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        name = _module_name(rel)
        held = is_heldout(rel)
        groups = [
            (f"functions of `{name}`", _documented(module.body, ast.FunctionDef)),
            (f"classes of `{name}`", _documented(module.body, ast.ClassDef)),
        ]
        for node in module.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                groups.append(
                    (f"methods of `{name}.{node.name}`", _documented(node.body, ast.FunctionDef))
                )
        for subject, items in groups:
            if len(items) >= MIN_ITEMS:
                lists.append(DocList(subject, tuple(items[:max_items]), held))
    return lists


def _module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _documented(body: list[ast.stmt], kind: type) -> list[tuple[str, str]]:
    items = []
    for node in body:
        if isinstance(node, kind) and not node.name.startswith("_"):  # type: ignore[attr-defined]
            doc = ast.get_docstring(node)  # type: ignore[arg-type]
            detail = _detail(doc) if doc else ""
            if detail:
                items.append((node.name, detail))  # type: ignore[attr-defined]
    return items


def _detail(doc: str) -> str:
    """The docstring's first paragraph on one line, cut at a word before MAX_DETAIL_CHARS."""
    text = re.sub(r"\s+", " ", doc.strip().split("\n\n")[0]).strip()
    if len(text) > MAX_DETAIL_CHARS:
        text = text[:MAX_DETAIL_CHARS].rsplit(" ", 1)[0]
    return text.strip()


@dataclass(frozen=True)
class Example:
    """One causal training sequence and which of its targets carry loss."""

    ids: tuple[int, ...]
    loss: tuple[bool, ...]  # loss[i]: whether ids[i] is predicted with loss (ids[0]: never)


def examples(doc: DocList, encode, fork_id: int, child_id: int, eos_id: int) -> list[Example]:
    """The main sequence and one child sequence per item. `encode(text) -> list[int]`."""
    prompt = encode(doc.prompt)
    skeleton: list[int] = []
    forks: list[int] = []  # length of the skeleton up to and including each fork token
    for number, (name, _detail_text) in enumerate(doc.items, start=1):
        line = ("\n" if number > 1 else "") + f"{number}. `{name}`:"
        skeleton += [*encode(line), fork_id]
        forks.append(len(skeleton))
    main = Example(
        (*prompt, *skeleton, eos_id),
        tuple([False] * len(prompt) + [True] * (len(skeleton) + 1)),
    )
    out = [main]
    for (_name, detail), end in zip(doc.items, forks, strict=True):
        context = [*prompt, *skeleton[:end], child_id]
        own = [*encode(" " + detail), eos_id]
        out.append(Example(tuple(context + own), tuple([False] * len(context) + [True] * len(own))))
    return out


def inline_example(doc: DocList, encode, eos_id: int) -> Example:
    """The same answer written sequentially, each detail inline after its item: what a model
    that was never tuned for APAR writes (the released model starts from one)."""
    prompt = encode(doc.prompt)
    lines = [f"{number}. `{name}`: {detail}" for number, (name, detail) in enumerate(doc.items, 1)]
    answer = [*encode("\n".join(lines)), eos_id]
    return Example((*prompt, *answer), tuple([False] * len(prompt) + [True] * len(answer)))


def inline_rows(lists: list[DocList], encode, eos_id: int, spec: AparSpec) -> list[Example]:
    """The inline examples of `inline_share` of the lists, drawn by their own seeded generator.
    With `spec.inline_windows` every list is eligible and a long one is cut into row-sized
    windows (`windows`); without it (the recipe before 2026-11-28) only lists whose inline
    form fits one row whole are drawn (3.5 items on average against 4.3 for `apar-small`'s
    lists), which taught the fork-banned model short lists: on the 73 held-out prompts it
    wrote 10 % fewer list items than APAR (docs/apar.md)."""
    whole = {d: inline_example(d, encode, eos_id) for d in lists}
    length = spec.seq_len + 1
    if not spec.inline_windows:
        fits = [d for d, ex in whole.items() if len(ex.ids) <= length]
        count = min(round(spec.inline_share * len(lists)), len(fits))
        return [whole[d] for d in random.Random(spec.seed).sample(fits, count)]
    drawn = random.Random(spec.seed).sample(lists, round(spec.inline_share * len(lists)))
    return [w for d in drawn for w in windows(whole[d], length)]


def windows(ex: Example, length: int, context: int = WINDOW_CONTEXT) -> list[Example]:
    """`ex` as examples of at most `length` tokens, every target with loss in exactly one:
    the first window is its opening; each next one ends `length - context` tokens further
    (or at the end) and carries loss only on targets no earlier window covered, so each of
    them is predicted from at least `context` tokens before it (packing never splits an
    example, so a longer one would lose its tail and its EOS)."""
    assert 0 < context < length
    n = len(ex.ids)
    out = [Example(ex.ids[:length], ex.loss[:length])]
    covered = min(n, length)
    while covered < n:
        end = min(n, covered + length - context)
        start = end - length
        loss = tuple(flag and i >= covered for i, flag in enumerate(ex.loss[start:end], start))
        out.append(Example(ex.ids[start:end], loss))
        covered = end
    return out


def writes_detail_inline(answer: str) -> bool:
    """Whether a list answer's first item ("1. `name`:") is followed by text on its line."""
    _, colon, rest = answer.partition("`:")
    return bool(colon) and bool(rest.split("\n", 1)[0].strip())


def digest(lists: list[DocList]) -> str:
    """A fingerprint of the lists (the stdlib differs between Python versions)."""
    h = hashlib.sha256()
    for doc in lists:
        h.update(doc.subject.encode() + b"\0")
        for name, detail in doc.items:
            h.update(f"{name}\0{detail}\0".encode())
    return h.hexdigest()


def code_prompt(source: str, max_chars: int = 160) -> str:
    """The opening lines of a source file, whole lines up to `max_chars`: an unstructured
    prompt (the model continues code; it has never seen a fork there)."""
    lines = source.splitlines(keepends=True)
    text = ""
    for line in lines:
        if text and len(text) + len(line) > max_chars:
            break
        text += line
    return text[:max_chars]


def eval_prompts(lists: list[DocList], root: Path) -> dict[str, list[str]]:
    """Held-out prompts by kind: every held-out list's request, and the opening lines of
    every held-out source file (whatever the code corpus' byte budget), each ordered by a
    hash so that a prefix mixes modules."""
    held = sorted((d for d in lists if d.heldout), key=lambda d: _order(d.subject))
    files = sorted((r for r in candidate_files(root) if is_heldout(r)), key=_order)
    code = [code_prompt((root / r).read_text(encoding="utf-8", errors="replace")) for r in files]
    return {"structured": [d.prompt for d in held], "unstructured": [c for c in code if c.strip()]}


def _order(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()
