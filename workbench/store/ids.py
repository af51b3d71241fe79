"""Ids of stored runs and profiles: twelve hex digits that always read back as text.

An id is typed into scenarios and `--set` overrides, where YAML reads `190660135082` as an
integer; an id of digits only (about one draw in 280) would then fail to match its run. So a
new id holds at least one of the letters a-f; ids already stored keep their form.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

ID_LENGTH = 12
_LETTERS = frozenset("abcdef")


def _random_hex() -> str:
    return uuid.uuid4().hex[:ID_LENGTH]


def new_id(draw: Callable[[], str] = _random_hex) -> str:
    """A fresh random id with a letter in it (redrawn while it is digits only)."""
    while True:
        candidate = draw()
        if _LETTERS.intersection(candidate):
            return candidate
