"""Did-you-mean for catalog names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The catalog name the user most likely meant: one that extends what they typed
    (`h100` → `h100-sxm`, which plain similarity would rank below `h200`), else the most
    similar one."""
    names = list(known)
    typed = name.strip().lower()
    extending = [k for k in names if typed and k.startswith(typed)]
    if extending:
        return min(extending, key=len)
    close = difflib.get_close_matches(typed, names, n=1, cutoff=0.4)
    return close[0] if close else None


def unknown_name_message(kind: str, name: str, known: Iterable[str]) -> str:
    names = list(known)
    guess = closest_name(name, names)
    hint = f"; did you mean {guess!r}?" if guess else ""
    return f"unknown {kind} {name!r}{hint} (known: {', '.join(names)})"
