"""A deterministic text corpus: the Python standard library's own source files.

Files are taken in the order of a hash of their relative path (so a byte budget samples the
whole library rather than its first letters) and split into train / held-out by another hash
of the path, each side filling its own byte budget. The stdlib differs slightly between
Python patch versions: the corpus digest and the Python version go into the model card.
"""

from __future__ import annotations

import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Not code, or not the stdlib: tests, the IDLE app, third-party packages, codec tables and
# pydoc's help text blob.
EXCLUDED_DIRS = frozenset(
    {"test", "tests", "idlelib", "site-packages", "dist-packages", "encodings", "pydoc_data"}
)
MAX_FILE_BYTES = 100_000
HELDOUT_EVERY = 10  # about one file in ten goes to the held-out side


@dataclass(frozen=True)
class Corpus:
    train: tuple[str, ...]  # one document per file
    heldout: tuple[str, ...]
    train_files: tuple[str, ...]  # relative paths, in corpus order
    heldout_files: tuple[str, ...]
    digest: str  # sha256 over (path, bytes) of every selected file, both sides
    python_version: str
    stdlib: str

    @property
    def train_bytes(self) -> int:
        return sum(len(t.encode()) for t in self.train)

    @property
    def heldout_bytes(self) -> int:
        return sum(len(t.encode()) for t in self.heldout)

    def summary(self) -> dict[str, object]:
        return {
            "source": "python stdlib *.py",
            "stdlib": self.stdlib,
            "python_version": self.python_version,
            "digest": self.digest,
            "train_files": len(self.train_files),
            "heldout_files": len(self.heldout_files),
            "train_bytes": self.train_bytes,
            "heldout_bytes": self.heldout_bytes,
        }


def _hash(tag: str, rel: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{tag}:{rel}".encode()).digest()[:8], "big")


def is_heldout(rel: str) -> bool:
    return _hash("split", rel) % HELDOUT_EVERY == 0


def candidate_files(root: Path) -> list[str]:
    """Relative POSIX paths of usable stdlib files, sorted."""
    out = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if EXCLUDED_DIRS.intersection(rel.parts[:-1]) or not path.is_file():
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            continue
        out.append(rel.as_posix())
    return sorted(out)


def build_corpus(train_bytes: int, heldout_bytes: int, root: Path | None = None) -> Corpus:
    root = Path(root or sysconfig.get_paths()["stdlib"])
    budgets = {False: train_bytes, True: heldout_bytes}
    used = {False: 0, True: 0}
    chosen: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
    digest = hashlib.sha256()
    for rel in sorted(candidate_files(root), key=lambda r: (_hash("order", r), r)):
        side = is_heldout(rel)
        data = (root / rel).read_bytes()
        if used[side] + len(data) > budgets[side]:
            continue
        used[side] += len(data)
        chosen[side].append((rel, data.decode("utf-8", errors="replace")))
        digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
        if all(used[s] + 2_000 > budgets[s] for s in budgets):
            break
    return Corpus(
        train=tuple(t for _, t in chosen[False]),
        heldout=tuple(t for _, t in chosen[True]),
        train_files=tuple(r for r, _ in chosen[False]),
        heldout_files=tuple(r for r, _ in chosen[True]),
        digest=digest.hexdigest(),
        python_version=platform.python_version(),
        stdlib=str(root),
    )
