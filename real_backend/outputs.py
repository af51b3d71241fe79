"""What a real run answered, as records: each request's emitted token ids and their text.

Written for every real run (a real run on a CPU or one GPU emits thousands to millions of
tokens, a few MB in the database at most: nothing worth turning off), never by the
simulator, which has no tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from workbench.errors import WorkbenchError, first_line
from workbench.records import OutputRecords


def output_records(outputs: dict[int, list[int]], folder: Path | None) -> OutputRecords:
    """Per request, in id order, its tokens and their text (the checkpoint's tokenizer,
    special tokens left out; None without a `tokenizer.json` or a folder)."""
    ids = sorted(outputs)
    tokens = [[int(t) for t in outputs[i]] for i in ids]
    return with_text(
        OutputRecords(np.asarray(ids, dtype=np.int64), tokens, [None] * len(ids)), folder
    )


def with_text(outputs: OutputRecords, folder: Path | None) -> OutputRecords:
    """`outputs` with every request's text decoded by the checkpoint's tokenizer."""
    tokenizer = output_tokenizer(folder)
    if tokenizer is None:
        return outputs
    texts = [tokenizer.decode(tokens) for tokens in outputs.token_ids]
    return OutputRecords(outputs.request_id, outputs.token_ids, texts)


def output_tokenizer(folder: Path | None) -> Tokenizer | None:
    """The checkpoint's tokenizer that writes the answers' text (None without one); one that
    cannot be read is a one-line error, which a real run checks before serving anything."""
    path = None if folder is None else folder / "tokenizer.json"
    if path is None or not path.is_file():
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers library raises its own plain Exception
        raise WorkbenchError(
            f"not a readable tokenizer ({first_line(exc)})", source=str(path)
        ) from None
