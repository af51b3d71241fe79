"""Read question files: JSON lines of `{"question_id", "category", "turns": [...]}`.

The format of FastChat's MT-bench / Vicuna-bench and Spec-Bench question files
(`data/prompts/`). Other keys on a line (`reference`...) are ignored. Files are parsed once
per process and cached by path, modification time and size.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class Question:
    question_id: object  # as in the file (an int in the shipped files); names it in errors
    category: str
    turns: tuple[str, ...]  # the user's messages, in order


def read_questions(path: Path) -> tuple[Question, ...]:
    """Every question of the file, in file order."""
    try:
        stat = path.stat()
    except OSError:
        raise WorkbenchError("file not found", source=str(path)) from None
    return _read_cached(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _read_cached(path: str, mtime_ns: int, size: int) -> tuple[Question, ...]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise WorkbenchError(f"not a UTF-8 text file ({exc.reason})", source=path) from None
    questions = tuple(
        _question(line, number, path) for number, line in enumerate(lines, start=1) if line.strip()
    )
    if not questions:
        raise WorkbenchError("no questions: expected JSON lines", source=path)
    return questions


def _question(line: str, number: int, path: str) -> Question:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WorkbenchError(f"line {number}: malformed JSON ({exc.msg})", source=path) from None
    if not isinstance(record, dict):
        raise WorkbenchError(f"line {number}: expected a JSON object", source=path)
    category, turns = record.get("category"), record.get("turns")
    if not isinstance(category, str):
        raise WorkbenchError(f"line {number}: expected a string `category`", source=path)
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise WorkbenchError(
            f"line {number}: expected `turns`, a non-empty list of strings", source=path
        )
    return Question(record.get("question_id", number), category, tuple(turns))
