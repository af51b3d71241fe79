"""Ids of stored runs and profiles: twelve hex digits that read back as text, prefixes too.

An id, or any prefix of it, is typed into scenarios and `--set` overrides, where YAML reads
`190660135082` as an integer, `0123` as octal 83 and `0b10` as binary 2: such an id would be
refused by the scenario's validation or name another run. So a new id begins with one of the
letters a-f, which makes every prefix of it text to YAML; ids already stored keep their form.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

ID_LENGTH = 12
_LETTERS = frozenset("abcdef")


def _random_hex() -> str:
    return uuid.uuid4().hex[:ID_LENGTH]


def new_id(draw: Callable[[], str] | None = None) -> str:
    """A fresh random id beginning with a letter (redrawn until it does: 2.7 draws on average)."""
    draw = draw or _random_hex
    while True:
        candidate = draw()
        if candidate[0] in _LETTERS:
            return candidate
