"""A trained predictor on disk: the head's weights and a JSON card saying what it is.

`<folder>/head.safetensors` holds the head's tensors, `<folder>/card.json` its config, the
model it reads (checkpoint folder and a digest of its files), how its data was made, and
its held-out errors against constant baselines. A folder with both is complete: a save
writes into `<folder>.partial/` and renames it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from real_backend.length_predictor.heads import HeadConfig, LengthHead
from workbench.errors import WorkbenchError

HEAD_FILE = "head.safetensors"
CARD_FILE = "card.json"
CARD_KIND = "length_predictor"


def checkpoint_digest(checkpoint: Path) -> str:
    """sha256 over the checkpoint's config and weight files: which model a head belongs to."""
    digest = hashlib.sha256()
    for path in sorted([checkpoint / "config.json", *checkpoint.glob("*.safetensors")]):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def save_predictor(folder: Path, head: LengthHead, card: dict[str, Any]) -> dict[str, Any]:
    """Write the head and its card (kind and head config added); returns the full card."""
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    state = {name: t.detach().contiguous() for name, t in head.state_dict().items()}
    save_file(state, str(partial / HEAD_FILE))
    full = {"kind": CARD_KIND, "head": head.cfg.as_dict(), **card}
    (partial / CARD_FILE).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)
    return full


def load_predictor(folder: Path) -> tuple[LengthHead, dict[str, Any]]:
    """The head and its card; a folder without them is a one-line error naming the fix."""
    card_path = folder / CARD_FILE
    if not card_path.is_file() or not (folder / HEAD_FILE).is_file():
        raise WorkbenchError(
            f"no trained length predictor in {folder}; train one with `workbench predictor "
            "train --model-zoo NAME` (or --checkpoint FOLDER --out DIR)",
            field="predictor.path",
        )
    try:
        card = json.loads(card_path.read_text())
        head = LengthHead(HeadConfig(**card["head"]))
        head.load_state_dict(load_file(str(folder / HEAD_FILE)))
    except (json.JSONDecodeError, KeyError, TypeError, RuntimeError) as exc:
        raise WorkbenchError(
            f"not a length predictor ({type(exc).__name__}: {exc})", source=str(card_path)
        ) from None
    if card.get("kind") != CARD_KIND:
        raise WorkbenchError(f"kind is not {CARD_KIND!r}", source=str(card_path), field="kind")
    return head.eval(), card
